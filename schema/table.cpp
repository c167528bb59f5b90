// Table naming.
#include "schema/table.hpp"

namespace pgtide::schema {

std::string default_target_name(const std::string& schema, const std::string& name) {
    if (schema == "public") {
        return name;
    }
    return schema + "__" + name;
}

} // namespace pgtide::schema
