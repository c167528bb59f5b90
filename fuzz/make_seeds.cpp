// Builds the fuzz targets' seed corpora from the captures in tests/fixtures (and the example
// config and the config tests' TOML), in the input layouts of fuzz/fuzz_support.hpp.
// Usage: pgtide_fuzz_seeds SOURCE_DIR OUT_DIR   (writes OUT_DIR/<target>/, replacing it)
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_support.hpp"

namespace pgtide::fuzz {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        throw std::runtime_error("cannot read " + path.string());
    }
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        lines.push_back(line);
    }
    return lines;
}

std::vector<std::string> split_tabs(const std::string& line) {
    std::vector<std::string> cols;
    std::size_t start = 0;
    for (std::size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1) {
        cols.push_back(line.substr(start, tab - start));
    }
    cols.push_back(line.substr(start));
    return cols;
}

void append_u16(std::string& out, std::size_t n) {
    out += static_cast<char>((n >> 8) & 0xff);
    out += static_cast<char>(n & 0xff);
}

void append_be(std::string& out, std::uint64_t v, int bytes) {
    for (int shift = 8 * (bytes - 1); shift >= 0; shift -= 8) {
        out += static_cast<char>((v >> shift) & 0xff);
    }
}

// One target's corpus directory.
class Corpus {
public:
    Corpus(const fs::path& out, const std::string& target) : dir_(out / target) {
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }

    void add(std::string_view bytes) {
        char name[32];
        std::snprintf(name, sizeof name, "seed-%05zu", count_++);
        std::ofstream(dir_ / name, std::ios::binary)
            .write(bytes.data(), std::streamsize(bytes.size()));
    }

    std::size_t count() const { return count_; }

private:
    fs::path dir_;
    std::size_t count_ = 0;
};

// ---- pgoutput ------------------------------------------------------------------------------

std::string session(std::uint8_t mode, const std::vector<std::string>& messages) {
    std::string out(1, static_cast<char>(mode));
    for (const std::string& m : messages) {
        append_u16(out, m.size());
        out += m;
    }
    return out;
}

// A pgoutput message as the walsender sends it: an XLogData CopyData payload.
std::string xlog_data(const std::string& message, std::uint64_t lsn) {
    std::string out = "w";
    append_be(out, lsn, 8);
    append_be(out, lsn + message.size(), 8);
    append_be(out, 0x0002'9d8c'0000'0000, 8);
    return out + message;
}

void pgoutput_seeds(const fs::path& fixtures, Corpus& corpus) {
    for (const auto& entry : fs::directory_iterator(fixtures / "pgoutput")) {
        const std::string name = entry.path().filename().string();
        if (!name.starts_with("proto") || entry.path().extension() != ".hex") {
            continue;
        }
        const int proto = name[5] - '0';
        std::vector<std::string> messages;
        for (const std::string& line : lines_of(read_file(entry.path()))) {
            if (!line.empty() && line[0] != '#') {
                messages.push_back(unhex(line));
            }
        }
        const auto version_mode = static_cast<std::uint8_t>(proto - 1);
        corpus.add(session(version_mode, messages));
        corpus.add(session(3, messages)); // the same session under proto_version 4

        std::vector<std::string> framed;
        std::uint64_t lsn = 0x1'6b37'4d48;
        for (const std::string& m : messages) {
            framed.push_back(xlog_data(m, lsn));
            lsn += m.size();
        }
        std::string keepalive = "k";
        append_be(keepalive, lsn, 8);
        append_be(keepalive, 0x0002'9d8c'0000'0000, 8);
        keepalive += '\1';
        framed.push_back(keepalive);
        corpus.add(session(version_mode | kPgoutputWalsender, framed));

        // Windows of three messages, each after the Stream Start of the block it sits in.
        std::optional<std::size_t> open_block;
        for (std::size_t i = 0; i < messages.size(); ++i) {
            std::vector<std::string> window;
            if (open_block) {
                window.push_back(messages[*open_block]);
            }
            for (std::size_t j = i; j < messages.size() && j < i + 3; ++j) {
                window.push_back(messages[j]);
            }
            corpus.add(session(version_mode, window));
            if (messages[i][0] == 'S') {
                open_block = i;
            } else if (messages[i][0] == 'E') {
                open_block.reset();
            }
        }
    }
}

// ---- binary COPY ---------------------------------------------------------------------------

void binary_copy_seeds(const fs::path& fixtures, Corpus& corpus) {
    for (const char* file : {"copy_rows.bin", "copy_empty.bin"}) {
        const std::string stream = read_file(fixtures / file);
        for (const char chunk : {0, 1, 7}) {
            corpus.add(std::string(1, chunk) + stream);
        }
        corpus.add(std::string(1, 0) + stream.substr(0, stream.size() / 2));
    }
    // One-column rows holding the captured binary values.
    std::string stream("PGCOPY\n\377\r\n\0\0\0\0\0\0\0\0\0", 19);
    for (const std::string& line : lines_of(read_file(fixtures / "schema_values.tsv"))) {
        const auto cols = split_tabs(line);
        if (cols.size() == 5) {
            const std::string value = unhex(cols[4]);
            append_be(stream, 1, 2);
            append_be(stream, value.size(), 4);
            stream += value;
        }
    }
    append_be(stream, 1, 2);
    append_be(stream, 0xffffffff, 4); // a NULL
    append_be(stream, 0xffff, 2);     // the trailer
    corpus.add(std::string(1, 0) + stream);
    corpus.add(std::string(1, 13) + stream);
}

// ---- codecs --------------------------------------------------------------------------------

void codec_seeds(const fs::path& fixtures, Corpus& corpus) {
    for (const auto& entry : fs::directory_iterator(fixtures)) {
        if (entry.path().extension() != ".tsv") {
            continue;
        }
        for (const std::string& line : lines_of(read_file(entry.path()))) {
            const auto cols = split_tabs(line);
            if (cols.size() != 5) {
                continue;
            }
            const schema::TypeRef type{static_cast<std::uint32_t>(std::stoul(cols[1])),
                                       static_cast<std::uint32_t>(std::stoul(cols[2]))};
            std::string header(3, '\0');
            const std::size_t index = codec_type_index(type);
            header[1] = static_cast<char>(index >> 8);
            header[2] = static_cast<char>(index & 0xff);
            corpus.add(header + unhex(cols[3]));
            header[0] = static_cast<char>(kCodecBinary);
            corpus.add(header + unhex(cols[4]));
        }
    }
}

// ---- config --------------------------------------------------------------------------------

void config_seeds(const fs::path& source, Corpus& corpus) {
    const auto add = [&](ConfigMode mode, std::string_view text) {
        corpus.add(std::string(1, static_cast<char>(mode)) + std::string(text));
    };
    add(ConfigMode::Toml, read_file(source / "pgtide.example.toml"));
    // The raw strings of the config tests: mostly TOML, valid and not.
    const std::string tests = read_file(source / "tests/app/config_test.cpp");
    for (std::size_t at = tests.find("R\""); at != std::string::npos; at = tests.find("R\"", at)) {
        const std::size_t open = tests.find('(', at);
        if (open == std::string::npos) {
            break;
        }
        const std::string delimiter = tests.substr(at + 2, open - at - 2);
        const std::string end = ")" + delimiter + "\"";
        const std::size_t close = tests.find(end, open);
        if (delimiter.size() > 16 || delimiter.find_first_of(" \t\n\\\")") != std::string::npos ||
            close == std::string::npos) {
            at += 2; // not a raw string (e.g. the end of a word inside a string)
            continue;
        }
        add(ConfigMode::Toml, std::string_view(tests).substr(open + 1, close - open - 1));
        at = close + end.size();
    }
    for (const char* size : {"4MiB", "512 KiB", "100B", "4MB", "1TB", "18446744073709551615"}) {
        add(ConfigMode::Size, size);
    }
    for (const char* duration : {"100ms", "10s", "5m", "1h", "1m30s", "2h3m4s5ms"}) {
        add(ConfigMode::Duration, duration);
    }
    for (const char* dsn : {"host=db user=app password=secret dbname=x",
                            "host = db password = 'se\\'cret word' sslpassword=x",
                            "postgresql://app:secret@db:5432/x?sslmode=require&password=y",
                            "postgres://db/x?sslpassword=a&application_name=b"}) {
        add(ConfigMode::Dsn, dsn);
    }
    for (const char* table : {"t", "public.t", "\"Odd.Name\"", "s.\"t.u\""}) {
        add(ConfigMode::TableName, table);
    }
}

} // namespace
} // namespace pgtide::fuzz

int main(int argc, char** argv) {
    using namespace pgtide::fuzz;
    if (argc != 3) {
        std::cerr << "usage: pgtide_fuzz_seeds SOURCE_DIR OUT_DIR\n";
        return 2;
    }
    try {
        const fs::path source = argv[1];
        const fs::path out = argv[2];
        const fs::path fixtures = source / "tests/fixtures";
        Corpus pgoutput(out, "pgoutput");
        pgoutput_seeds(fixtures, pgoutput);
        Corpus copy(out, "binary_copy");
        binary_copy_seeds(fixtures, copy);
        Corpus codec(out, "codec");
        codec_seeds(fixtures, codec);
        Corpus config(out, "config");
        config_seeds(source, config);
        std::cout << "pgtide_fuzz_seeds: " << pgoutput.count() << " pgoutput, " << copy.count()
                  << " binary_copy, " << codec.count() << " codec, " << config.count()
                  << " config seeds in " << out.string() << "\n";
    } catch (const std::exception& e) {
        std::cerr << "pgtide_fuzz_seeds: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
