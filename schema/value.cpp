// Value helpers.
#include "schema/value.hpp"

namespace pgtide::schema {

const char* storage_class_name(StorageClass c) {
    switch (c) {
    case StorageClass::Integer:
        return "INTEGER";
    case StorageClass::Real:
        return "REAL";
    case StorageClass::Text:
        return "TEXT";
    case StorageClass::Blob:
        return "BLOB";
    }
    return "TEXT";
}

std::size_t value_bytes(const Value& v) {
    if (const auto* s = std::get_if<std::string>(&v)) {
        return 16 + s->size();
    }
    if (const auto* b = std::get_if<Blob>(&v)) {
        return 16 + b->bytes.size();
    }
    return 16;
}

} // namespace pgtide::schema
