// Every mapped type of DESIGN §5 through every path: the same values copied through the snapshot,
// streamed with pgoutput text values and streamed with pgoutput binary values land in SQLite as
// identical cells (value and storage class), spelled as DESIGN §5's "Precise rules" say.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/pg_server.hpp"
#include "tests/support/pgtide_process.hpp"
#include "tests/support/sqlite_file.hpp"

namespace pgtide::testing {
namespace {

constexpr int kValueRows = 4; // rows 1..4 hold values; row 5 is NULL in every column
constexpr int kRows = kValueRows + 1;
constexpr int kTextStreamOffset = 100;   // the same values again, streamed as text
constexpr int kBinaryStreamOffset = 200; // and again, streamed as binary

constexpr const char* kFallbackLog = "streaming text values: a column has no binary decoder";

const std::string kNumeric1000 = [] {
    std::string out = "9";
    for (int i = 0; i < 99; ++i) {
        out += "0123456789";
    }
    return out + ".123456789";
}();
const std::string kNumeric1000Sql = "('9' || repeat('0123456789', 99) || '.123456789')::numeric";

struct Column {
    std::string name;
    std::string type;
    std::string sqlite_type;         // the declared SQLite type
    bool binary;                     // has a binary decoder (else text in every path)
    std::vector<std::string> values; // SQL expressions for rows 1..kValueRows
};

std::vector<Column> columns(int pg_major) {
    const std::string all_bytes = "(SELECT decode(string_agg(lpad(to_hex(g), 2, '0'), '' ORDER "
                                  "BY g), 'hex') FROM generate_series(0, 255) g)";
    // Infinite intervals exist from PostgreSQL 17 on.
    const std::string interval4 = pg_major >= 17 ? "'infinity'" : "'2562047788:00:54.775807'";
    return {
        {"c_bool", "boolean", "INTEGER", true, {"true", "false", "true", "false"}},
        {"c_int2", "int2", "INTEGER", true, {"32767", "-32768", "0", "1"}},
        {"c_int4", "int4", "INTEGER", true, {"2147483647", "-2147483648", "0", "42"}},
        {"c_int8",
         "int8",
         "INTEGER",
         true,
         {"9223372036854775807", "-9223372036854775808", "0", "1"}},
        {"c_oid", "oid", "INTEGER", true, {"4294967295", "0", "1", "16384"}},
        {"c_float4", "float4", "REAL", true, {"'1.1'", "'-0'", "'NaN'", "'-Infinity'"}},
        {"c_float4b", "float4", "REAL", true, {"'1e-45'", "'3.4028235e38'", "'0.3'", "'Infinity'"}},
        {"c_float8", "float8", "REAL", true, {"'5e-324'", "'-0'", "'NaN'", "'Infinity'"}},
        {"c_float8b",
         "float8",
         "REAL",
         true,
         {"'1.7976931348623157e308'", "'0.1'", "'-Infinity'", "'-123.456'"}},
        {"c_num124", "numeric(12,4)", "TEXT", true, {"1.5", "-99999999.9999", "'NaN'", "0"}},
        {"c_numeric",
         "numeric",
         "TEXT",
         true,
         {kNumeric1000Sql, "'-Infinity'", "'Infinity'", "'-0.00001234'"}},
        {"c_text",
         "text",
         "TEXT",
         true,
         {"'✓ 𝄞 日本語 ünï'", "''", "E'tab\\t\"q\" \\\\ back\\nnl'", "'NULL'"}},
        {"c_varchar", "varchar(10)", "TEXT", true, {"'abc'", "''", "'é𝄞'", "'  sp  '"}},
        {"c_bpchar", "char(5)", "TEXT", true, {"'ab'", "''", "'é'", "'abcde'"}},
        {"c_name", "name", "TEXT", true, {"'pg_class'", "''", "repeat('n', 63)", "'ü'"}},
        {"c_citext", "citext", "TEXT", false, {"'MiXeD'", "''", "'ü'", "'x'"}},
        {"c_enum", "mood", "TEXT", true, {"'happy'", "'sad'", "'ok'", "'happy'"}},
        {"c_xml",
         "xml",
         "TEXT",
         true,
         {"'<a>ü ✓</a>'", "'<?xml version=\"1.0\" standalone=\"yes\"?><a/>'", "'<b/>'",
          "'plain text'"}},
        {"c_bytea", "bytea", "BLOB", true, {all_bytes, "'\\x'", "'\\x00'", "'abc'"}},
        {"c_uuid",
         "uuid",
         "TEXT",
         true,
         {"'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", "'00000000-0000-0000-0000-000000000000'",
          "'ffffffff-ffff-ffff-ffff-ffffffffffff'", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"}},
        {"c_json",
         "json",
         "TEXT",
         true,
         {R"('{"ü": "\u00e9 ✓ 𝄞", "n": 1.50,  "e": "\"q\""}')", "'[]'", R"('"str"')", "'null'"}},
        {"c_jsonb",
         "jsonb",
         "TEXT",
         true,
         {R"('{"ü": "\u00e9 ✓ 𝄞", "n": 1.50,  "e": "\"q\""}')", "'[]'", "'1.50'",
          R"('{"a": {"b": [1, 2.0]}}')"}},
        {"c_date",
         "date",
         "TEXT",
         true,
         {"'0044-03-15 BC'", "'infinity'", "'-infinity'", "'5874897-12-31'"}},
        {"c_time",
         "time",
         "TEXT",
         true,
         {"'24:00:00'", "'00:00:00'", "'23:59:59.999999'", "'12:34:56.5'"}},
        {"c_timetz",
         "timetz",
         "TEXT",
         true,
         {"'12:00:00+01:02:03'", "'24:00:00-15:59'", "'23:59:59.999999+15:59:59'",
          "'00:00:00+00'"}},
        {"c_ts",
         "timestamp",
         "TEXT",
         true,
         {"'4713-01-01 00:00:00 BC'", "'infinity'", "'-infinity'", "'10000-01-01 00:00:00.5'"}},
        {"c_tstz",
         "timestamptz",
         "TEXT",
         true,
         {"'2024-06-01 12:00:00+05:30'", "'4713-01-01 00:00:00+00 BC'", "'-infinity'",
          "'294276-12-31 23:59:59.999999+00'"}},
        {"c_interval",
         "interval",
         "TEXT",
         true,
         {"'1 year 13 months -1 day 00:00:00.000001'", "'-14 months 0.5 seconds'", "'0'",
          interval4}},
        {"c_dom_int", "posint", "INTEGER", true, {"1", "2147483647", "7", "42"}},
        {"c_dom_text", "label", "TEXT", true, {"'dom ✓'", "''", "'x'", "'  y'"}},
        {"c_int4_arr",
         "int4[]",
         "TEXT",
         true,
         {"'{1,NULL,-2147483648}'", "'{}'", "'[0:2]={1,2,3}'", "'{42}'"}},
        {"c_int2d",
         "int[][]",
         "TEXT",
         true,
         {"'{{1,2},{NULL,4}}'", "'{{{1}},{{2}}}'", "'[1:2][-1:0]={{1,2},{3,4}}'", "'{}'"}},
        {"c_text_arr",
         "text[]",
         "TEXT",
         true,
         {R"(ARRAY['a"b', 'c,d', NULL, 'NULL', '', E'x\\y', '{}', '✓'])", "'{}'",
          R"('{{"a",NULL},{"","b,c"}}')", "ARRAY['  sp  ']"}},
        {"c_float8_arr",
         "float8[]",
         "TEXT",
         true,
         {"'{1.5,NaN,Infinity,-Infinity,-0,5e-324}'", "'{}'", "'[-2:-1]={NULL,1e300}'", "'{0.1}'"}},
        {"c_float4_arr",
         "float4[]",
         "TEXT",
         true,
         {"'{1.1,NaN,-0}'", "'{}'", "'{0.3}'", "'{1e6}'"}},
        {"c_numeric_arr",
         "numeric[]",
         "TEXT",
         true,
         {"'{1.50,NaN,-0.001,Infinity}'", "'{}'", "ARRAY[" + kNumeric1000Sql + ", NULL]", "'{0}'"}},
        {"c_bool_arr", "bool[]", "TEXT", true, {"'{t,f,NULL}'", "'{}'", "'{{t},{f}}'", "'{t}'"}},
        {"c_tstz_arr",
         "timestamptz[]",
         "TEXT",
         true,
         {"ARRAY['2000-01-01 00:00:00+00', 'infinity', '4713-01-01 00:00:00+00 BC', "
          "NULL]::timestamptz[]",
          "'{}'", "ARRAY['2024-06-01 12:00:00.5+05:30']::timestamptz[]", "'{-infinity}'"}},
        {"c_date_arr",
         "date[]",
         "TEXT",
         true,
         {"'{0044-03-15 BC,infinity,10000-01-01}'", "'{}'", "'{NULL}'", "'{2024-02-29}'"}},
        {"c_interval_arr",
         "interval[]",
         "TEXT",
         true,
         {"ARRAY['1 year 13 months -1 day 00:00:00.000001', '0']::interval[]", "'{}'", "'{NULL}'",
          "'{P1D}'"}},
        {"c_bytea_arr",
         "bytea[]",
         "TEXT",
         true,
         {R"('{"\\x00ff",NULL,"\\x"}')", "'{}'", "ARRAY[" + all_bytes + "]", "'{abc}'"}},
        {"c_jsonb_arr",
         "jsonb[]",
         "TEXT",
         true,
         {R"(ARRAY['{"ü": "\u00e9"}', NULL, '1.50']::jsonb[])", "'{}'", "ARRAY['null']::jsonb[]",
          R"(ARRAY['[1, "x"]']::jsonb[])"}},
        {"c_enum_arr", "mood[]", "TEXT", true, {"'{happy,sad}'", "'{}'", "'{NULL}'", "'{ok}'"}},
        {"c_uuid_arr",
         "uuid[]",
         "TEXT",
         true,
         {"'{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11,NULL}'", "'{}'", "'{}'", "'{}'"}},
        {"c_inet",
         "inet",
         "TEXT",
         false,
         // Host addresses without their mask are InetWithoutMaskIsCopiedAsPostgresPrintsIt.
         {"'192.168.0.1/24'", "'::1/64'", "'10.0.0.0/8'", "'0.0.0.0/0'"}},
        {"c_money", "money", "TEXT", false, {"1234.56", "-0.01", "0", "'92233720368547758.07'"}},
        {"c_range",
         "int4range",
         "TEXT",
         false,
         {"int4range(1, 10)", "'empty'", "int4range(NULL, 5)", "'[3,7]'"}},
    };
}

/// A cell as SQLite holds it: SqliteFile's text spelling and its storage class.
struct Cell {
    std::optional<std::string> value;
    std::string type;
    friend bool operator==(const Cell&, const Cell&) = default;
};

std::ostream& operator<<(std::ostream& os, const Cell& c) {
    return os << (c.value ? "'" + *c.value + "'" : std::string("NULL")) << " (" << c.type << ")";
}

class AllTypes : public PgTest {
protected:
    /// One pgtide pipeline: its publication, slot and SQLite file.
    struct Pipeline {
        std::string table;
        std::string publication;
        std::string slot;
        std::string sqlite_path;
        std::vector<Column> columns;
    };

    void SetUp() override {
        PgTest::SetUp();
        if (IsSkipped() || HasFatalFailure()) {
            return;
        }
        // pgtide's session settings, so the source's own text output can be compared.
        for (const char* setting :
             {"TimeZone = 'UTC'", "extra_float_digits = 1", "bytea_output = 'hex'",
              "DateStyle = 'ISO'", "IntervalStyle = 'iso_8601'", "lc_monetary = 'C'"}) {
            exec("ALTER DATABASE " + dbname() + " SET " + setting);
        }
        dir_ = std::filesystem::temp_directory_path() /
               ("pgtide-at-" + std::to_string(::getpid()) + "-" + dbname());
        std::filesystem::create_directories(dir_);
        config_path_ = (dir_ / "binary.toml").string();
        std::ofstream(config_path_) << "[stream]\nbinary = true\n";
    }
    void TearDown() override {
        if (!dir_.empty()) {
            std::error_code ec;
            std::filesystem::remove_all(dir_, ec);
        }
    }

    Pipeline pipeline(const std::string& table, bool binary_only) const {
        Pipeline p{table,
                   "pub_" + table,
                   "s_" + table + "_" + dbname(),
                   (dir_ / (table + ".db")).string(),
                   {}};
        for (const Column& c : columns(pg().major_version())) {
            if (c.binary || !binary_only) {
                p.columns.push_back(c);
            }
        }
        return p;
    }

    void create(const Pipeline& p) const {
        std::string ddl = "CREATE TABLE " + p.table + " (id int PRIMARY KEY";
        std::string insert;
        for (const Column& c : p.columns) {
            ddl += ", " + c.name + " " + c.type;
        }
        exec(ddl + ")");
        for (int row = 1; row <= kValueRows; ++row) {
            std::string names = "id";
            std::string values = std::to_string(row);
            for (const Column& c : p.columns) {
                names += ", " + c.name;
                values += ", " + c.values[row - 1];
            }
            exec("INSERT INTO " + p.table + " (" + names + ") VALUES (" + values + ")");
        }
        exec("INSERT INTO " + p.table + " (id) VALUES (" + std::to_string(kRows) + ")");
        exec("CREATE PUBLICATION " + p.publication + " FOR TABLE " + p.table);
    }

    /// Inserts rows 1..kRows again under keys offset+1..offset+kRows, value for value.
    void copy_rows(const Pipeline& p, int offset) const {
        std::string names;
        for (const Column& c : p.columns) {
            names += ", " + c.name;
        }
        exec("INSERT INTO " + p.table + " (id" + names + ") SELECT id + " + std::to_string(offset) +
             names + " FROM " + p.table + " WHERE id <= " + std::to_string(kRows));
    }

    /// `pgtide run --once`, with `[stream] binary = true` when binary; its stderr.
    std::string run_once(const Pipeline& p, bool binary) const {
        std::vector<std::string> args{"run", "--once", "--json"};
        if (binary) {
            args.insert(args.end(), {"-c", config_path_});
        }
        args.insert(args.end(), {"--source", dsn(), "--publication", p.publication, "--slot",
                                 p.slot, "--to", "sqlite:" + p.sqlite_path});
        std::string out;
        std::string err;
        const int code = PgtideProcess::run(args, &out, &err);
        EXPECT_EQ(code, 0) << "stdout:\n" << out << "\nstderr:\n" << err;
        return err;
    }

    /// Every cell of the row with key `id`, in p.columns order.
    std::vector<Cell> cells(const Pipeline& p, int id) const {
        std::string values;
        std::string types;
        for (const Column& c : p.columns) {
            values += (values.empty() ? "" : ", ") + c.name;
            types += std::string(types.empty() ? "" : ", ") + "typeof(" + c.name + ")";
        }
        const std::string where = " FROM " + p.table + " WHERE id = " + std::to_string(id);
        const SqliteFile db(p.sqlite_path);
        const Rows v = db.rows("SELECT " + values + where);
        const Rows t = db.rows("SELECT " + types + where);
        EXPECT_EQ(v.size(), 1u) << "row " << id << " of " << p.sqlite_path;
        std::vector<Cell> out;
        if (v.size() != 1 || t.size() != 1) {
            return out;
        }
        for (std::size_t i = 0; i < p.columns.size(); ++i) {
            out.push_back(Cell{v[0][i], t[0][i].value_or("?")});
        }
        return out;
    }

    /// The snapshot, text-stream and binary-stream copies of every row agree cell for cell.
    void expect_three_paths_identical(const Pipeline& p) const {
        for (int row = 1; row <= kRows; ++row) {
            const auto copied = cells(p, row);
            const auto text = cells(p, row + kTextStreamOffset);
            const auto binary = cells(p, row + kBinaryStreamOffset);
            ASSERT_EQ(copied.size(), p.columns.size());
            ASSERT_EQ(text.size(), p.columns.size());
            ASSERT_EQ(binary.size(), p.columns.size());
            for (std::size_t i = 0; i < p.columns.size(); ++i) {
                SCOPED_TRACE(p.table + " row " + std::to_string(row) + " column " +
                             p.columns[i].name + " (" + p.columns[i].type + ")");
                EXPECT_EQ(text[i], copied[i]) << "text stream vs snapshot";
                EXPECT_EQ(binary[i], copied[i]) << "binary stream vs snapshot";
                if (row == kRows) {
                    EXPECT_EQ(copied[i], (Cell{null, "null"}));
                } else {
                    EXPECT_EQ(copied[i].type,
                              p.columns[i].sqlite_type == "REAL" && copied[i].value == "NaN"
                                  ? "text"
                                  : lower(p.columns[i].sqlite_type));
                }
            }
        }
    }

    /// The cell of `column` in the row with key id.
    Cell cell(const Pipeline& p, const std::string& column, int id) const {
        const SqliteFile db(p.sqlite_path);
        const std::string where = " FROM " + p.table + " WHERE id = " + std::to_string(id);
        const Rows v = db.rows("SELECT " + column + where);
        const Rows t = db.rows("SELECT typeof(" + column + ")" + where);
        if (v.size() != 1 || t.size() != 1) {
            ADD_FAILURE() << "no row " << id << " in " << p.table;
            return {};
        }
        return Cell{v[0][0], t[0][0].value_or("?")};
    }

    static std::string lower(std::string s) {
        for (char& ch : s) {
            ch = char(std::tolower(static_cast<unsigned char>(ch)));
        }
        return s;
    }

    std::filesystem::path dir_;
    std::string config_path_;
};

TEST_F(AllTypes, SnapshotTextStreamAndBinaryStreamGiveIdenticalCells) {
    exec("CREATE EXTENSION citext");
    exec("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')");
    exec("CREATE DOMAIN posint AS int4 CHECK (VALUE > 0)");
    exec("CREATE DOMAIN label AS text");
    // `all_types` has every column; the types without a binary decoder (citext, inet, money,
    // int4range) make its binary pass fall back to text. `bin_types` has the others only, so
    // its binary pass really decodes pgoutput's binary values.
    const Pipeline all = pipeline("all_types", /*binary_only=*/false);
    const Pipeline bin = pipeline("bin_types", /*binary_only=*/true);
    ASSERT_EQ(all.columns.size(), 47u);
    ASSERT_EQ(bin.columns.size(), 43u);
    create(all);
    create(bin);

    // 1. The snapshot (binary COPY; `::text` for the columns without a binary decoder).
    for (const Pipeline* p : {&all, &bin}) {
        EXPECT_EQ(run_once(*p, false).find(kFallbackLog), std::string::npos);
    }
    // 2. The same values streamed with pgoutput text values.
    for (const Pipeline* p : {&all, &bin}) {
        copy_rows(*p, kTextStreamOffset);
        EXPECT_EQ(run_once(*p, false).find(kFallbackLog), std::string::npos);
    }
    // 3. And with `[stream] binary = true`.
    for (const Pipeline* p : {&all, &bin}) {
        copy_rows(*p, kBinaryStreamOffset);
    }
    const std::string all_log = run_once(all, true);
    EXPECT_NE(all_log.find(kFallbackLog), std::string::npos) << all_log;
    const std::string bin_log = run_once(bin, true);
    EXPECT_EQ(bin_log.find(kFallbackLog), std::string::npos) << bin_log;
    EXPECT_NE(bin_log.find("streaming"), std::string::npos) << bin_log;

    expect_three_paths_identical(all);
    expect_three_paths_identical(bin);
    // The binary-decoded table agrees with the text-decoded one, column for column.
    for (int row = 1; row <= kRows; ++row) {
        for (const Column& c : bin.columns) {
            SCOPED_TRACE("row " + std::to_string(row) + " column " + c.name);
            EXPECT_EQ(cell(bin, c.name, row + kBinaryStreamOffset),
                      cell(all, c.name, row + kBinaryStreamOffset));
        }
    }

    // Declared SQLite types are exactly the storage classes.
    for (const Pipeline* p : {&all, &bin}) {
        const Rows declared = SqliteFile(p->sqlite_path)
                                  .rows("SELECT name, type FROM pragma_table_info('" + p->table +
                                        "') WHERE name LIKE 'c\\_%' ESCAPE '\\' ORDER BY cid");
        ASSERT_EQ(declared.size(), p->columns.size());
        for (std::size_t i = 0; i < declared.size(); ++i) {
            EXPECT_EQ(declared[i], (Row{p->columns[i].name, p->columns[i].sqlite_type}));
        }
    }

    // DESIGN §5's canonical spellings, in every path.
    std::string all_bytes = "\\x";
    for (int b = 0; b < 256; ++b) {
        static constexpr char kHex[] = "0123456789abcdef";
        all_bytes += kHex[b >> 4];
        all_bytes += kHex[b & 15];
    }
    const std::string interval4 =
        pg().major_version() >= 17 ? "infinity" : "PT2562047788H54.775807S";
    struct Expected {
        std::string column;
        int row;
        Cell cell;
    };
    const std::vector<Expected> expected = {
        {"c_bool", 1, {"1", "integer"}},
        {"c_bool", 2, {"0", "integer"}},
        {"c_int2", 2, {"-32768", "integer"}},
        {"c_int8", 1, {"9223372036854775807", "integer"}},
        {"c_int8", 2, {"-9223372036854775808", "integer"}},
        {"c_oid", 1, {"4294967295", "integer"}},
        {"c_float4", 1, {"1.1", "real"}},
        // SQLite stores an integral REAL as an integer, so -0 reads back as 0 in every path.
        {"c_float4", 2, {"0", "real"}},
        {"c_float4", 3, {"NaN", "text"}},
        {"c_float4", 4, {"-Infinity", "real"}},
        {"c_float4b", 1, {"1e-45", "real"}},
        {"c_float4b", 2, {"3.4028235e+38", "real"}},
        {"c_float4b", 3, {"0.3", "real"}},
        {"c_float8", 1, {"5e-324", "real"}},
        {"c_float8", 2, {"0", "real"}},
        {"c_float8", 3, {"NaN", "text"}},
        {"c_float8", 4, {"Infinity", "real"}},
        {"c_float8b", 1, {"1.7976931348623157e+308", "real"}},
        {"c_num124", 1, {"1.5000", "text"}},
        {"c_num124", 2, {"-99999999.9999", "text"}},
        {"c_num124", 3, {"NaN", "text"}},
        {"c_num124", 4, {"0.0000", "text"}},
        {"c_numeric", 1, {kNumeric1000, "text"}},
        {"c_numeric", 2, {"-Infinity", "text"}},
        {"c_numeric", 4, {"-0.00001234", "text"}},
        {"c_text", 1, {"✓ 𝄞 日本語 ünï", "text"}},
        {"c_text", 2, {"", "text"}},
        {"c_text", 3, {"tab\t\"q\" \\ back\nnl", "text"}},
        {"c_varchar", 3, {"é𝄞", "text"}},
        {"c_bpchar", 1, {"ab   ", "text"}},
        {"c_bpchar", 2, {"     ", "text"}},
        {"c_bpchar", 3, {"é    ", "text"}},
        {"c_name", 3, {std::string(63, 'n'), "text"}},
        {"c_enum", 1, {"happy", "text"}},
        {"c_xml", 1, {"<a>ü ✓</a>", "text"}},
        {"c_bytea", 1, {all_bytes, "blob"}},
        {"c_bytea", 2, {"\\x", "blob"}},
        {"c_uuid", 1, {"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "text"}},
        {"c_json", 1, {R"({"ü": "\u00e9 ✓ 𝄞", "n": 1.50,  "e": "\"q\""})", "text"}},
        {"c_jsonb", 1, {R"({"e": "\"q\"", "n": 1.50, "ü": "é ✓ 𝄞"})", "text"}},
        {"c_jsonb", 4, {R"({"a": {"b": [1, 2.0]}})", "text"}},
        {"c_date", 1, {"0044-03-15 BC", "text"}},
        {"c_date", 2, {"infinity", "text"}},
        {"c_date", 4, {"5874897-12-31", "text"}},
        {"c_time", 1, {"24:00:00", "text"}},
        {"c_time", 3, {"23:59:59.999999", "text"}},
        {"c_time", 4, {"12:34:56.5", "text"}},
        {"c_timetz", 1, {"12:00:00+01:02:03", "text"}},
        {"c_timetz", 2, {"24:00:00-15:59", "text"}},
        {"c_timetz", 4, {"00:00:00+00", "text"}},
        {"c_ts", 1, {"4713-01-01T00:00:00 BC", "text"}},
        {"c_ts", 3, {"-infinity", "text"}},
        {"c_ts", 4, {"10000-01-01T00:00:00.5", "text"}},
        {"c_tstz", 1, {"2024-06-01T06:30:00Z", "text"}},
        {"c_tstz", 2, {"4713-01-01T00:00:00Z BC", "text"}},
        {"c_tstz", 4, {"294276-12-31T23:59:59.999999Z", "text"}},
        {"c_interval", 1, {"P2Y1M-1DT0.000001S", "text"}},
        {"c_interval", 2, {"P-1Y-2MT0.5S", "text"}},
        {"c_interval", 3, {"PT0S", "text"}},
        {"c_interval", 4, {interval4, "text"}},
        {"c_dom_int", 2, {"2147483647", "integer"}},
        {"c_dom_text", 1, {"dom ✓", "text"}},
        {"c_int4_arr", 1, {"[1,null,-2147483648]", "text"}},
        {"c_int4_arr", 2, {"[]", "text"}},
        {"c_int4_arr", 3, {"[1,2,3]", "text"}},
        {"c_int2d", 1, {"[[1,2],[null,4]]", "text"}},
        {"c_int2d", 2, {"[[[1]],[[2]]]", "text"}},
        {"c_int2d", 3, {"[[1,2],[3,4]]", "text"}},
        {"c_text_arr", 1, {R"(["a\"b","c,d",null,"NULL","","x\\y","{}","✓"])", "text"}},
        {"c_text_arr", 3, {R"([["a",null],["","b,c"]])", "text"}},
        {"c_float8_arr", 1, {R"([1.5,"NaN","Infinity","-Infinity",-0,5e-324])", "text"}},
        {"c_float8_arr", 3, {"[null,1e+300]", "text"}},
        {"c_float4_arr", 1, {R"([1.1,"NaN",-0])", "text"}},
        {"c_float4_arr", 4, {"[1e+06]", "text"}},
        {"c_numeric_arr", 1, {R"([1.50,"NaN",-0.001,"Infinity"])", "text"}},
        {"c_numeric_arr", 3, {"[" + kNumeric1000 + ",null]", "text"}},
        {"c_bool_arr", 1, {"[true,false,null]", "text"}},
        {"c_bool_arr", 3, {"[[true],[false]]", "text"}},
        {"c_tstz_arr",
         1,
         {R"(["2000-01-01T00:00:00Z","infinity","4713-01-01T00:00:00Z BC",null])", "text"}},
        {"c_tstz_arr", 3, {R"(["2024-06-01T06:30:00.5Z"])", "text"}},
        {"c_date_arr", 1, {R"(["0044-03-15 BC","infinity","10000-01-01"])", "text"}},
        {"c_date_arr", 3, {"[null]", "text"}},
        {"c_interval_arr", 1, {R"(["P2Y1M-1DT0.000001S","PT0S"])", "text"}},
        {"c_bytea_arr", 1, {R"(["\\x00ff",null,"\\x"])", "text"}},
        {"c_bytea_arr", 3, {"[\"\\" + all_bytes + "\"]", "text"}},
        {"c_jsonb_arr", 1, {R"(["{\"ü\": \"é\"}",null,"1.50"])", "text"}},
        {"c_jsonb_arr", 3, {R"(["null"])", "text"}},
        {"c_enum_arr", 1, {R"(["happy","sad"])", "text"}},
        {"c_uuid_arr", 1, {R"(["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",null])", "text"}},
        {"c_citext", 1, {"MiXeD", "text"}},
        {"c_inet", 1, {"192.168.0.1/24", "text"}},
        {"c_money", 1, {"$1,234.56", "text"}},
        {"c_money", 2, {"-$0.01", "text"}},
        {"c_range", 1, {"[1,10)", "text"}},
        {"c_range", 2, {"empty", "text"}},
    };
    for (const Expected& e : expected) {
        for (const Pipeline* p : {&all, &bin}) {
            bool present = false;
            for (const Column& c : p->columns) {
                present = present || c.name == e.column;
            }
            if (!present) {
                continue;
            }
            for (const int offset : {0, kTextStreamOffset, kBinaryStreamOffset}) {
                SCOPED_TRACE(p->table + " row " + std::to_string(e.row + offset) + " column " +
                             e.column);
                EXPECT_EQ(cell(*p, e.column, e.row + offset), e.cell);
            }
        }
    }

    // The types kept as PostgreSQL's text output are exactly that output.
    for (const std::string column : {"c_citext", "c_inet", "c_money", "c_range", "c_xml"}) {
        for (int row = 1; row <= kValueRows; ++row) {
            SCOPED_TRACE(column + " row " + std::to_string(row));
            EXPECT_EQ(cell(all, column, row).value,
                      query_value("SELECT " + column +
                                  "::text FROM all_types WHERE id = " + std::to_string(row)));
        }
    }
}

// A type without a binary decoder is copied as `col::text`, but inet's cast to text is not its
// output function: it always appends the mask ('10.0.0.1'::inet::text = '10.0.0.1/32'), while
// PostgreSQL prints '10.0.0.1' and the stream sends that. Every path must give the printed form.
TEST_F(AllTypes, InetWithoutMaskIsCopiedAsPostgresPrintsIt) {
    const Pipeline p{"hosts",
                     "pub_hosts",
                     "s_hosts_" + dbname(),
                     (dir_ / "hosts.db").string(),
                     {{"c_inet",
                       "inet",
                       "TEXT",
                       false,
                       {"'10.0.0.1'", "'::1'", "'10.0.0.0/8'", "'192.168.0.1/24'"}},
                      {"c_cidr",
                       "cidr",
                       "TEXT",
                       false,
                       {"'10.0.0.1'", "'::1'", "'10.0.0.0/8'", "'192.168.0.0/24'"}}}};
    create(p);
    run_once(p, false);
    copy_rows(p, kTextStreamOffset);
    run_once(p, false);
    copy_rows(p, kBinaryStreamOffset);
    run_once(p, true);
    const std::vector<std::pair<std::string, std::vector<std::string>>> printed = {
        {"c_inet", {"10.0.0.1", "::1", "10.0.0.0/8", "192.168.0.1/24"}},
        {"c_cidr", {"10.0.0.1/32", "::1/128", "10.0.0.0/8", "192.168.0.0/24"}},
    };
    for (const auto& [column, values] : printed) {
        for (int row = 1; row <= kValueRows; ++row) {
            EXPECT_EQ(
                query_value("SELECT " + column + " FROM hosts WHERE id = " + std::to_string(row)),
                values[std::size_t(row - 1)]);
            for (const int offset : {0, kTextStreamOffset, kBinaryStreamOffset}) {
                SCOPED_TRACE(column + " row " + std::to_string(row + offset));
                EXPECT_EQ(cell(p, column, row + offset),
                          (Cell{values[std::size_t(row - 1)], "text"}));
            }
        }
    }
}

} // namespace
} // namespace pgtide::testing
