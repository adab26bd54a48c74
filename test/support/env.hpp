// An environment variable set or unset for one scope, for tests of what the library reads
// from the environment.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace rpclb::test {

/// Sets (or, with nullopt, unsets) `name` until the end of the scope, then puts back what
/// was there. Not thread safe: the environment is the process's, so no other thread may
/// read it meanwhile.
class ScopedEnv {
public:
    ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
        if (const char* old = std::getenv(name_.c_str())) old_ = old;
        if (value)
            ::setenv(name_.c_str(), value->c_str(), 1);
        else
            ::unsetenv(name_.c_str());
    }
    ~ScopedEnv() {
        if (old_)
            ::setenv(name_.c_str(), old_->c_str(), 1);
        else
            ::unsetenv(name_.c_str());
    }
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    std::string name_;
    std::optional<std::string> old_;
};

}  // namespace rpclb::test
