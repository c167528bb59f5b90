#include "tests/support/hex_fixture.hpp"

#include <fstream>

#include <gtest/gtest.h>

namespace pgtide::testing {

std::vector<std::string> load_pgoutput_fixture(const std::string& name) {
    std::ifstream in(std::string(PGTIDE_SOURCE_DIR) + "/tests/fixtures/pgoutput/" + name);
    EXPECT_TRUE(in) << name;
    std::vector<std::string> messages;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') {
            continue;
        }
        std::string bytes;
        for (std::size_t i = 0; i + 1 < line.size(); i += 2) {
            bytes.push_back(static_cast<char>(std::stoi(line.substr(i, 2), nullptr, 16)));
        }
        messages.push_back(std::move(bytes));
    }
    return messages;
}

} // namespace pgtide::testing
