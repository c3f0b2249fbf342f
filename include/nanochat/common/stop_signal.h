// Graceful stop for long jobs: the first SIGINT or SIGTERM only sets a flag that the loop
// polls between steps (finish the step, save, exit 0 with a line telling how to resume);
// a second one restores the default action, so pressing Ctrl-C twice still kills.
#pragma once

namespace nanochat {

void stop_signal_install();
int stop_signal_received();  // 0, or the signal number (SIGINT, SIGTERM)

}  // namespace nanochat
