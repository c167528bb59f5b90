// Process and file helpers for the test fixtures.
#include "tests/support/command.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

namespace pgtide::testing {

int exit_code_of(int wait_status) {
    if (WIFEXITED(wait_status)) {
        return WEXITSTATUS(wait_status);
    }
    if (WIFSIGNALED(wait_status)) {
        return 128 + WTERMSIG(wait_status);
    }
    return -1;
}

CommandResult run_command(const std::vector<std::string>& argv, const std::string& cwd) {
    if (argv.empty()) {
        throw std::invalid_argument("run_command: empty argv");
    }
    // A memory file rather than a pipe: a daemon that inherits it cannot keep us waiting.
    const int out = memfd_create("command-output", MFD_CLOEXEC);
    if (out < 0) {
        throw std::runtime_error(std::string("memfd_create: ") + std::strerror(errno));
    }
    std::vector<char*> args;
    for (const auto& a : argv) {
        args.push_back(const_cast<char*>(a.c_str()));
    }
    args.push_back(nullptr);

    const pid_t pid = fork();
    if (pid < 0) {
        const int e = errno;
        close(out);
        throw std::runtime_error(std::string("fork: ") + std::strerror(e));
    }
    if (pid == 0) {
        const int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) {
            dup2(devnull, 0);
        }
        dup2(out, 1);
        dup2(out, 2);
        if (!cwd.empty() && chdir(cwd.c_str()) != 0) {
            _exit(126);
        }
        execvp(args[0], args.data());
        const char msg[] = "exec failed\n";
        (void)!write(2, msg, sizeof msg - 1);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    CommandResult result{exit_code_of(status), {}};
    lseek(out, 0, SEEK_SET);
    char buf[8192];
    ssize_t n;
    while ((n = read(out, buf, sizeof buf)) > 0) {
        result.output.append(buf, size_t(n));
    }
    close(out);
    return result;
}

std::string make_temp_dir(const std::string& prefix) {
    const char* tmp = std::getenv("TMPDIR");
    std::string base = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
    std::string templ = base + "/" + prefix + "-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
        throw std::runtime_error("mkdtemp " + templ + ": " + std::strerror(errno));
    }
    return templ;
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

} // namespace pgtide::testing
