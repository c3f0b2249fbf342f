// download_file: one URL to one path, safely. The steps, in order:
//   1. the final name exists -> done (it only ever appears complete, by rename)
//   2. flock "<path>.lock" so one process downloads while the others wait, then skip
//   3. attempts: GET with "Range: bytes=<size of .tmp>-" so a partial .tmp continues, with
//      "If-Range: <validator>" (the ETag, else Last-Modified, its first bytes came with; kept
//      in <path>.tmp.validator) so a file changed on the server comes whole: a 200 instead of
//      a 206 restarts the .tmp, as does a .tmp whose validator is unknown; size checked
//      against the server's total and the cap, the verifier run, fsync, rename; failures
//      wait retry_base * 2^k and try again; a redirect from https to http is refused
//   4. a host that was never reached in this process fails at once (offline, DNS, refused):
//      retrying a machine with no network only makes the user wait
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <set>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "nanochat/common/atomic_file.h"
#include "nanochat/common/file_lock.h"
#include "http_get.h"
#include "nanochat/common/files.h"
#include "nanochat/common/log.h"
#include "nanochat/dataset.h"
#include "nanochat/parquet.h"

namespace nanochat {

// servers (scheme://host:port) that answered at least once in this process: failing to
// connect to one of them later is a hiccup worth retrying, not "offline"
static std::mutex g_hosts_mutex;
static std::set<std::string> g_hosts_reached;

static void host_mark_reached(const std::vector<std::string>& origins) {
  std::lock_guard<std::mutex> g(g_hosts_mutex);
  g_hosts_reached.insert(origins.begin(), origins.end());
}
static bool host_was_reached(const std::string& url) {
  std::lock_guard<std::mutex> g(g_hosts_mutex);
  return g_hosts_reached.count(http_parse_url(url).origin()) > 0;
}

static int64_t file_size(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? (int64_t)st.st_size : 0;
}

static bool cancelled(const DownloadOptions& o) { return o.cancel && o.cancel->load(); }

// the validator of the bytes in a .tmp, kept beside it
static std::string validator_path(const std::string& tmp) { return tmp + ".validator"; }

// a validator we may send back as a header value: no control bytes (cpp-httplib 0.11.4
// percent-decodes response headers and writes request headers unchecked, so a server's
// "%0D%0A" in its ETag would otherwise inject headers into our next request)
static bool header_safe(const std::string& v) {
  for (unsigned char ch : v)
    if (ch < 0x20 || ch == 0x7f) return false;
  return true;
}

// what If-Range may carry: a strong ETag (a weak one, W/"..", must not be used), else
// Last-Modified; "" when neither is usable
static std::string strong_validator(const HttpGetResult& h) {
  if (!h.etag.empty() && h.etag.rfind("W/", 0) != 0 && header_safe(h.etag)) return h.etag;
  return header_safe(h.last_modified) ? h.last_modified : "";
}

static std::string read_validator(const std::string& tmp) {
  std::ifstream f(validator_path(tmp), std::ios::binary);
  std::string v;
  std::getline(f, v);
  return header_safe(v) ? v : "";
}

// a partial file that cannot be continued: gone, with its validator
static void discard_partial(const std::string& tmp) {
  std::remove(tmp.c_str());
  std::remove(validator_path(tmp).c_str());
}

enum class AttemptEnd { complete, retry, permanent, unreachable, cancelled };

struct Attempt {
  AttemptEnd end;
  std::string error;
};

// one GET continuing tmp; `reported` is how many of tmp's bytes on_bytes has been told about
static Attempt download_attempt(const std::string& url, const std::string& tmp, const DownloadOptions& o,
                                int64_t& reported) {
  auto report = [&](int64_t now) {
    if (o.on_bytes && now != reported) o.on_bytes(now - reported);
    reported = now;
  };
  int64_t have = file_size(tmp);
  const std::string validator = have > 0 ? read_validator(tmp) : "";
  if (have > 0 && validator.empty()) {
    // nothing says the server's file is still the one these bytes came from: start over
    log_warn("%s: no validator for the partial %s (%lld bytes); downloading it again", url.c_str(), tmp.c_str(),
             (long long)have);
    discard_partial(tmp);
    have = 0;
  }
  report(have);
  FILE* f = nullptr;
  int64_t total = -1;
  std::string start_error, too_big;
  auto on_start = [&](const HttpGetResult& h) {
    if (o.max_file_bytes > 0 && h.total_size > o.max_file_bytes) {
      too_big = strprintf("the file is %lld bytes, more than the limit of %lld bytes", (long long)h.total_size,
                          (long long)o.max_file_bytes);
      return false;
    }
    if (h.body_offset != have) {
      if (h.body_offset != 0) {
        start_error = strprintf("server answered a range request for byte %lld at byte %lld", (long long)have,
                                (long long)h.body_offset);
        return false;
      }
      have = 0;  // a 200 to a range request: the whole file again, from the start
    }
    f = std::fopen(tmp.c_str(), have == 0 ? "wb" : "ab");
    if (!f) {
      start_error = strprintf("cannot write %s: %s", tmp.c_str(), std::strerror(errno));
      return false;
    }
    // what these bytes are a version of, for the next attempt's If-Range (none: it restarts)
    if (have == 0) {
      std::string v = strong_validator(h);
      if (v.empty()) std::remove(validator_path(tmp).c_str());
      else atomic_write_file(validator_path(tmp), v + "\n");
    }
    report(have);
    total = h.total_size;
    if (total >= 0 && o.on_total) o.on_total(total);
    return true;
  };
  std::string write_error;
  auto on_data = [&](const char* data, size_t n) {
    if (o.max_file_bytes > 0 && have + (int64_t)n > o.max_file_bytes) {  // no size given, or a false one
      too_big = strprintf("the server sent more than the limit of %lld bytes", (long long)o.max_file_bytes);
      return false;
    }
    if (std::fwrite(data, 1, n, f) != n) {
      write_error = strprintf("cannot write %s: %s", tmp.c_str(), std::strerror(errno));
      return false;
    }
    have += (int64_t)n;
    report(have);
    return !cancelled(o);
  };
  HttpGetOptions ho;
  ho.connect_timeout_seconds = o.connect_timeout_seconds;
  ho.read_timeout_seconds = o.read_timeout_seconds;
  ho.max_redirects = o.max_redirects;
  ho.if_range = validator;
  HttpGetResult h = http_get(url, have, ho, on_start, on_data);
  host_mark_reached(h.answered);
  if (f) {
    bool ok = std::fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = std::fclose(f) == 0 && ok;
    if (!ok && write_error.empty()) write_error = strprintf("cannot write %s: %s", tmp.c_str(), std::strerror(errno));
  }
  if (!write_error.empty()) return {AttemptEnd::permanent, write_error};
  if (!too_big.empty()) {
    discard_partial(tmp);
    report(0);
    return {AttemptEnd::permanent, too_big};
  }
  if (!start_error.empty()) return {AttemptEnd::retry, start_error};
  if (cancelled(o)) return {AttemptEnd::cancelled, "cancelled"};

  if (h.status == 416) {  // "range not satisfiable": the .tmp already holds every byte, or too many
    if (h.total_size >= 0 && have == h.total_size) {
      if (o.on_total) o.on_total(h.total_size);
      return {AttemptEnd::complete, ""};
    }
    discard_partial(tmp);
    report(0);
    return {AttemptEnd::retry, strprintf("server refused to resume at byte %lld; starting over", (long long)have)};
  }
  switch (h.failure) {
    case HttpFailure::none: break;
    case HttpFailure::refused: return {AttemptEnd::permanent, h.error};
    case HttpFailure::unreachable: {
      // offline only if neither the URL's server nor the one that failed ever answered
      bool seen = host_was_reached(url) || host_was_reached(h.final_url);
      return {seen ? AttemptEnd::retry : AttemptEnd::unreachable, h.error};
    }
    case HttpFailure::status: {
      // 4xx are the request's fault (missing file, forbidden) and will not change by waiting,
      // except timeouts and rate limits; 5xx and the rest may
      bool permanent = h.status == 0 ||
                       (h.status >= 400 && h.status < 500 && h.status != 408 && h.status != 425 && h.status != 429);
      return {permanent ? AttemptEnd::permanent : AttemptEnd::retry, h.error};
    }
    case HttpFailure::transfer:
    case HttpFailure::stopped: return {AttemptEnd::retry, h.error};
  }
  if (total >= 0 && have != total) {
    if (have > total) {
      discard_partial(tmp);
      report(0);
    }
    return {AttemptEnd::retry, strprintf("got %lld bytes of %lld", (long long)have, (long long)total)};
  }
  if (total < 0) log_warn("%s: the server sent no size; the length cannot be checked", url.c_str());
  return {AttemptEnd::complete, ""};
}

DownloadOutcome download_file(const std::string& url, const std::string& path, const DownloadOptions& o) {
  if (path_exists(path)) return DownloadOutcome::already_present;
  http_parse_url(url);  // a bad URL is the caller's mistake: say so before any lock or retry
  make_dirs(parent_dir(path));
  FileLock lock(path + ".lock", [&] { log_info("waiting for another process downloading %s", path.c_str()); });
  if (path_exists(path)) return DownloadOutcome::already_present;  // it finished while we waited

  std::string tmp = path + ".tmp";
  int64_t reported = 0;
  std::string last_error;
  for (int attempt = 1; attempt <= o.max_attempts; attempt++) {
    if (cancelled(o)) throw DownloadError("download of " + url + " cancelled", false);
    Attempt a = download_attempt(url, tmp, o, reported);
    if (a.end == AttemptEnd::complete) {
      try {
        if (o.verify) o.verify(tmp);
        if (std::rename(tmp.c_str(), path.c_str()) != 0)
          throw DownloadError(strprintf("cannot rename %s to %s: %s", tmp.c_str(), path.c_str(), std::strerror(errno)),
                              false);
        fsync_parent_dir(path);
        std::remove(validator_path(tmp).c_str());
        log_debug("downloaded %s -> %s", url.c_str(), path.c_str());
        return DownloadOutcome::downloaded;
      } catch (const DownloadError&) {
        throw;
      } catch (const Error& e) {
        // bad bytes cannot be resumed: throw them away and fetch the file again
        discard_partial(tmp);
        if (o.on_bytes) o.on_bytes(-reported);
        reported = 0;
        a = {AttemptEnd::retry, strprintf("downloaded file failed verification (%s)", e.what())};
      }
    }
    if (a.end == AttemptEnd::cancelled) throw DownloadError("download of " + url + " cancelled", false);
    if (a.end == AttemptEnd::unreachable)
      throw DownloadError(strprintf("cannot download %s: %s; the network looks unreachable, check the "
                                    "connection (or a proxy/firewall) and run again",
                                    url.c_str(), a.error.c_str()),
                          true);
    if (a.end == AttemptEnd::permanent)
      throw DownloadError(strprintf("cannot download %s: %s", url.c_str(), a.error.c_str()), false);
    last_error = a.error;
    if (attempt == o.max_attempts) break;
    double wait = o.retry_base_seconds * double(1 << (attempt - 1));
    log_warn("%s: attempt %d/%d failed (%s); retrying in %.1fs", url.c_str(), attempt, o.max_attempts, a.error.c_str(),
             wait);
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait);
    while (std::chrono::steady_clock::now() < until && !cancelled(o))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string resume = path_exists(tmp) ? " from " + tmp : "";
  throw DownloadError(strprintf("cannot download %s after %d attempts: %s; run again to resume%s", url.c_str(),
                                o.max_attempts, last_error.c_str(), resume.c_str()),
                      false);
}

void download_verify_parquet(const std::string& tmp_path) { ParquetFile check(tmp_path); }

}  // namespace nanochat
