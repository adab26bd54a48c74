#include <rpclb/detail/log.hpp>
#include <rpclb/service.hpp>

namespace rpclb {

void Service::set_exit_receiver(ExitReceiver receiver) {
    std::lock_guard lock(receiver_mutex_);
    receiver_ = std::move(receiver);
}

void Service::report_failure(std::string reason) noexcept { report(ServiceExit{true, std::move(reason)}); }

void Service::report_exit() noexcept { report(ServiceExit{false, {}}); }

void Service::report_escaped(const char* what) noexcept {
    try {
        report_failure(what ? "exception escaped " + name() + ": " + what
                            : "unknown exception escaped " + name());
    } catch (...) {
        report_failure("exception escaped a service");
    }
}

void Service::report(ServiceExit exit) noexcept {
    try {
        std::lock_guard lock(receiver_mutex_);
        if (receiver_) {
            receiver_(std::move(exit));
            return;
        }
    } catch (...) {
        // A receiver must not throw; nothing better to do than fall through and log.
    }
    try {
        if (exit.failed)
            RPCLB_LOG("supervisor", warning) << "service " << name()
                                             << " failed with no supervisor to restart it: " << exit.reason;
        else
            RPCLB_LOG("supervisor", info) << "service " << name() << " exited with no supervisor";
    } catch (...) {
    }
}

}  // namespace rpclb
