// Table naming, and which column type changes leave values as they were.
#include "schema/table.hpp"

#include "schema/pg_types.hpp"

namespace pgtide::schema {

std::string default_target_name(const std::string& schema, const std::string& name) {
    if (schema == "public") {
        return name;
    }
    return schema + "__" + name;
}

namespace {

bool is_integer(std::uint32_t t) {
    return t == oid::kInt2 || t == oid::kInt4 || t == oid::kInt8;
}

int integer_width(std::uint32_t t) {
    return t == oid::kInt2 ? 2 : t == oid::kInt4 ? 4 : 8;
}

bool is_time_with_precision(std::uint32_t t) {
    return t == oid::kTimestamp || t == oid::kTimestamptz || t == oid::kTime || t == oid::kTimetz;
}

// One scalar type (an array's element type, for arrays) to another, with their typmods.
bool scalar_change_keeps_values(std::uint32_t from, std::int32_t from_mod, std::uint32_t to,
                                std::int32_t to_mod) {
    if (from == to) {
        if (from_mod == to_mod || from == oid::kVarchar || from == oid::kVarbit) {
            return true; // a shorter varchar fails on longer values or needs USING
        }
        if (from == oid::kNumeric) {
            // typmod = ((precision << 16) | scale) + 4; -1: unconstrained (values keep theirs).
            return to_mod == -1 ||
                   (from_mod != -1 && ((from_mod - 4) & 0xffff) == ((to_mod - 4) & 0xffff));
        }
        if (is_time_with_precision(from)) {
            return to_mod == -1 || (from_mod != -1 && to_mod >= from_mod);
        }
        return false;
    }
    if (is_integer(from) && is_integer(to)) {
        return integer_width(to) > integer_width(from);
    }
    const bool from_text = from == oid::kText || from == oid::kVarchar;
    const bool to_text = to == oid::kText || to == oid::kVarchar;
    return from_text && to_text;
}

} // namespace

bool type_change_keeps_values(const TableColumn& before, const TableColumn& after) {
    const bool before_array = before.type.element_oid != 0;
    const bool after_array = after.type.element_oid != 0;
    if (before_array != after_array) {
        return false;
    }
    if (before_array) {
        return scalar_change_keeps_values(before.type.element_oid, before.typmod,
                                          after.type.element_oid, after.typmod);
    }
    return scalar_change_keeps_values(before.type.oid, before.typmod, after.type.oid, after.typmod);
}

} // namespace pgtide::schema
