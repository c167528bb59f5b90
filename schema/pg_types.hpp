// Built-in PostgreSQL type OIDs (stable across versions) and their array types.
#pragma once

#include <cstdint>

namespace pgtide::schema {

namespace oid {

constexpr std::uint32_t kBool = 16;
constexpr std::uint32_t kBytea = 17;
constexpr std::uint32_t kChar = 18; ///< "char", the one-byte type
constexpr std::uint32_t kName = 19;
constexpr std::uint32_t kInt8 = 20;
constexpr std::uint32_t kInt2 = 21;
constexpr std::uint32_t kInt2Vector = 22;
constexpr std::uint32_t kInt4 = 23;
constexpr std::uint32_t kText = 25;
constexpr std::uint32_t kOid = 26;
constexpr std::uint32_t kXid = 28;
constexpr std::uint32_t kOidVector = 30;
constexpr std::uint32_t kJson = 114;
constexpr std::uint32_t kXml = 142;
constexpr std::uint32_t kPoint = 600;
constexpr std::uint32_t kLseg = 601;
constexpr std::uint32_t kBox = 603;
constexpr std::uint32_t kLine = 628;
constexpr std::uint32_t kCidr = 650;
constexpr std::uint32_t kFloat4 = 700;
constexpr std::uint32_t kFloat8 = 701;
constexpr std::uint32_t kUnknown = 705;
constexpr std::uint32_t kMoney = 790;
constexpr std::uint32_t kMacaddr = 829;
constexpr std::uint32_t kInet = 869;
constexpr std::uint32_t kBpchar = 1042;
constexpr std::uint32_t kVarchar = 1043;
constexpr std::uint32_t kDate = 1082;
constexpr std::uint32_t kTime = 1083;
constexpr std::uint32_t kTimestamp = 1114;
constexpr std::uint32_t kTimestamptz = 1184;
constexpr std::uint32_t kInterval = 1186;
constexpr std::uint32_t kTimetz = 1266;
constexpr std::uint32_t kBit = 1560;
constexpr std::uint32_t kVarbit = 1562;
constexpr std::uint32_t kNumeric = 1700;
constexpr std::uint32_t kRecord = 2249;
constexpr std::uint32_t kUuid = 2950;
constexpr std::uint32_t kPgLsn = 3220;
constexpr std::uint32_t kTsvector = 3614;
constexpr std::uint32_t kJsonb = 3802;
constexpr std::uint32_t kJsonpath = 4072;

constexpr std::uint32_t kBoolArray = 1000;
constexpr std::uint32_t kByteaArray = 1001;
constexpr std::uint32_t kInt2Array = 1005;
constexpr std::uint32_t kInt4Array = 1007;
constexpr std::uint32_t kTextArray = 1009;
constexpr std::uint32_t kBpcharArray = 1014;
constexpr std::uint32_t kVarcharArray = 1015;
constexpr std::uint32_t kInt8Array = 1016;
constexpr std::uint32_t kFloat4Array = 1021;
constexpr std::uint32_t kFloat8Array = 1022;
constexpr std::uint32_t kOidArray = 1028;
constexpr std::uint32_t kTimestampArray = 1115;
constexpr std::uint32_t kDateArray = 1182;
constexpr std::uint32_t kTimeArray = 1183;
constexpr std::uint32_t kTimestamptzArray = 1185;
constexpr std::uint32_t kIntervalArray = 1187;
constexpr std::uint32_t kNumericArray = 1231;
constexpr std::uint32_t kTimetzArray = 1270;
constexpr std::uint32_t kUuidArray = 2951;
constexpr std::uint32_t kJsonArray = 199;
constexpr std::uint32_t kJsonbArray = 3807;

/// OIDs at or above this are assigned at run time (user types, extensions).
constexpr std::uint32_t kFirstNormalObjectId = 16384;

} // namespace oid

/// The element type of a built-in array type (e.g. 1007 int4[] → 23 int4); 0 when
/// `array_oid` is not a built-in array type (int2vector and oidvector are not arrays here:
/// their text form is space-separated).
std::uint32_t builtin_array_element(std::uint32_t array_oid);

/// The built-in array type whose elements are `element_oid`; 0 when there is none.
std::uint32_t builtin_array_of(std::uint32_t element_oid);
/// Whether values of the type `type_oid` (a column's atttypid) keep their meaning in binary
/// COPY form from one cluster to another of any supported version: built-in types, except
/// those whose binary form is a cluster's own OIDs (the reg* types, e.g. regclass, and their
/// arrays) or that have none (aclitem). User types (also domains, enums, composites and their
/// arrays) are not: composite and array values name their types' OIDs.
bool binary_portable(std::uint32_t type_oid);

} // namespace pgtide::schema
