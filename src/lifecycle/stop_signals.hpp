// The StopSignals alive in this process, so that a node giving up its name ends their waits.
#pragma once

namespace rpclb::detail {

/// Ends the wait of every StopSignal alive in this process as StopSignal::request_stop()
/// would (its wait returns 0): a node of this process gave up its name
/// (Cluster::name_taken). Any thread; never blocks on a wait.
void stop_every_signal() noexcept;

}  // namespace rpclb::detail
