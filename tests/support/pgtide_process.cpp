// PgtideProcess: spawn, signal, reap the pgtide binary under test.
#include "tests/support/pgtide_process.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/command.hpp"

extern char** environ;

namespace pgtide::testing {

std::string pgtide_binary() {
    const char* env = std::getenv("PGTIDE_BINARY_OVERRIDE");
    return (env != nullptr && *env != '\0') ? env : PGTIDE_BINARY;
}

PgtideProcess::PgtideProcess(std::vector<std::string> args, std::vector<std::string> env)
    : dir_(make_temp_dir("pgtide-run")) {
    const std::string binary = pgtide_binary();
    const std::string out_path = dir_ + "/stdout";
    const std::string err_path = dir_ + "/stderr";

    // Everything the child needs is built before fork: only async-signal-safe calls after it.
    std::vector<char*> argv{const_cast<char*>(binary.c_str())};
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);

    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
        const std::string entry = *e;
        const auto name = entry.substr(0, entry.find('='));
        bool overridden = false;
        for (const auto& x : env) {
            overridden = overridden || x.substr(0, x.find('=')) == name;
        }
        if (!overridden) {
            env_strings.push_back(entry);
        }
    }
    env_strings.insert(env_strings.end(), env.begin(), env.end());
    std::vector<char*> envp;
    for (auto& e : env_strings) {
        envp.push_back(e.data());
    }
    envp.push_back(nullptr);

    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (out < 0 || err < 0 || in < 0) {
        throw std::runtime_error("cannot open output files in " + dir_);
    }
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(in, 0);
        dup2(out, 1);
        dup2(err, 2);
        execve(argv[0], argv.data(), envp.data());
        const char msg[] = "PgtideProcess: execve failed\n";
        (void)!write(2, msg, sizeof msg - 1);
        _exit(127);
    }
    const int fork_errno = errno;
    close(out);
    close(err);
    close(in);
    if (pid < 0) {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
        throw std::runtime_error(std::string("fork: ") + std::strerror(fork_errno));
    }
    pid_ = pid;
}

PgtideProcess::~PgtideProcess() {
    if (!exit_code_ && pid_ > 0) {
        ::kill(pid_, SIGKILL);
        reap(true);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

bool PgtideProcess::reap(bool block) {
    if (exit_code_) {
        return true;
    }
    int status = 0;
    for (;;) {
        struct rusage usage {};
        const pid_t r = wait4(pid_, &status, block ? 0 : WNOHANG, &usage);
        if (r == pid_) {
            exit_code_ = exit_code_of(status);
            peak_rss_kb_ = usage.ru_maxrss;
            return true;
        }
        if (r == 0) {
            return false;
        }
        if (errno != EINTR) {
            throw std::runtime_error(std::string("wait4: ") + std::strerror(errno));
        }
    }
}

int PgtideProcess::wait() {
    reap(true);
    return *exit_code_;
}

std::optional<int> PgtideProcess::wait_for(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!reap(false)) {
        if (std::chrono::steady_clock::now() >= deadline) {
            return std::nullopt;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return exit_code_;
}

void PgtideProcess::kill(int sig) {
    if (!exit_code_) {
        ::kill(pid_, sig);
    }
}

bool PgtideProcess::running() {
    return !reap(false);
}

std::string PgtideProcess::stdout_text() const {
    return read_file(dir_ + "/stdout");
}

std::string PgtideProcess::stderr_text() const {
    return read_file(dir_ + "/stderr");
}

int PgtideProcess::run(std::vector<std::string> args, std::string* out, std::string* err) {
    PgtideProcess p(std::move(args));
    const int code = p.wait();
    if (out != nullptr) {
        *out = p.stdout_text();
    }
    if (err != nullptr) {
        *err = p.stderr_text();
    }
    return code;
}

} // namespace pgtide::testing
