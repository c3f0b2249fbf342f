#include "nanochat/common/stop_signal.h"

#include <csignal>

namespace nanochat {

static volatile std::sig_atomic_t g_stop_signal = 0;

static void on_stop_signal(int sig) {
  g_stop_signal = sig;
  std::signal(sig, SIG_DFL);  // the next one kills
}

void stop_signal_install() {
  g_stop_signal = 0;
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_signal_received() { return g_stop_signal; }

}  // namespace nanochat
