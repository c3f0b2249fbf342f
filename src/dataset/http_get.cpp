#include "http_get.h"

#include <httplib.h>

#include "nanochat/common/error.h"

namespace nanochat {

std::string HttpUrl::origin() const { return scheme + "://" + host + ":" + std::to_string(port); }

HttpUrl http_parse_url(const std::string& url) {
  HttpUrl u;
  size_t sep = url.find("://");
  if (sep == std::string::npos) fail("'%s' is not an http(s) URL", url.c_str());
  u.scheme = url.substr(0, sep);
  if (u.scheme != "http" && u.scheme != "https") fail("'%s': only http and https URLs can be downloaded", url.c_str());
  size_t host_begin = sep + 3, slash = url.find('/', host_begin);
  std::string authority = url.substr(host_begin, slash == std::string::npos ? std::string::npos : slash - host_begin);
  u.path = slash == std::string::npos ? "/" : url.substr(slash);
  u.port = u.scheme == "https" ? 443 : 80;
  size_t colon = authority.rfind(':');
  if (colon != std::string::npos && authority.find(']', colon) == std::string::npos) {
    std::string port = authority.substr(colon + 1);
    authority = authority.substr(0, colon);
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end || p <= 0 || p > 65535) fail("'%s': bad port '%s'", url.c_str(), port.c_str());
    u.port = (int)p;
  }
  if (authority.size() > 2 && authority.front() == '[' && authority.back() == ']')
    authority = authority.substr(1, authority.size() - 2);  // IPv6 literal
  if (authority.empty()) fail("'%s': no host", url.c_str());
  u.host = authority;
  return u;
}

// Location may be absolute, scheme-relative ("//host/x"), absolute-path or relative
static std::string resolve_location(const HttpUrl& from, const std::string& location) {
  if (location.find("://") != std::string::npos) return location;
  if (location.rfind("//", 0) == 0) return from.scheme + ":" + location;
  if (!location.empty() && location[0] == '/') return from.origin() + location;
  std::string dir = from.path.substr(0, from.path.rfind('/') + 1);
  return from.origin() + dir + location;
}

static int64_t header_int(const httplib::Response& r, const char* name) {
  if (!r.has_header(name)) return -1;
  std::string v = r.get_header_value(name);
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  return (v.empty() || *end || x < 0) ? -1 : (int64_t)x;
}

// "bytes 100-199/1000" -> start 100, total 1000; "bytes */1000" -> start -1, total 1000
static void parse_content_range(const std::string& v, int64_t& start, int64_t& total) {
  start = -1, total = -1;
  long long a = -1, b = -1, t = -1;
  if (std::sscanf(v.c_str(), "bytes %lld-%lld/%lld", &a, &b, &t) == 3) start = a, total = t;
  else if (std::sscanf(v.c_str(), "bytes */%lld", &t) == 1) total = t;
}

// https_proxy / http_proxy (either case) unless the host is loopback or matches no_proxy
// (comma-separated names or domain suffixes, "*" for all)
static const char* env_either(const char* lower, const char* upper) {
  const char* v = std::getenv(lower);
  if (!v || !*v) v = std::getenv(upper);
  return v && *v ? v : nullptr;
}

static bool proxy_for(const HttpUrl& u, HttpUrl& proxy) {
  if (u.host == "127.0.0.1" || u.host == "localhost" || u.host == "::1") return false;
  const char* p = u.scheme == "https" ? env_either("https_proxy", "HTTPS_PROXY")
                                      : env_either("http_proxy", "HTTP_PROXY");
  if (!p) return false;
  if (const char* no = env_either("no_proxy", "NO_PROXY")) {
    std::string list = no, item;
    for (size_t i = 0; i <= list.size(); i++) {
      if (i < list.size() && list[i] != ',') {
        if (list[i] != ' ') item += list[i];
        continue;
      }
      if (!item.empty() && item[0] == '.') item = item.substr(1);
      if (item == "*" || u.host == item ||
          (!item.empty() && u.host.size() > item.size() &&
           u.host.compare(u.host.size() - item.size() - 1, std::string::npos, "." + item) == 0))
        return false;
      item.clear();
    }
  }
  std::string url = p;
  if (url.find("://") == std::string::npos) url = "http://" + url;
  proxy = http_parse_url(url);
  return true;
}

HttpGetResult http_get(const std::string& url, int64_t range_from, const HttpGetOptions& opts,
                       const std::function<bool(const HttpGetResult&)>& on_start,
                       const std::function<bool(const char*, size_t)>& on_data) {
  HttpGetResult out;
  std::string current = url;
  std::vector<std::string> answered;
  for (int hop = 0;; hop++) {
    HttpUrl u = http_parse_url(current);
    out = HttpGetResult();
    out.final_url = current;
    out.answered = answered;
    httplib::Client cli(u.origin());
    cli.set_connection_timeout(opts.connect_timeout_seconds);
    cli.set_read_timeout(opts.read_timeout_seconds);
    cli.set_write_timeout(opts.connect_timeout_seconds);
    cli.set_follow_location(false);  // followed below, so every hop gets these settings
    cli.set_keep_alive(false);
    cli.set_decompress(false);
    HttpUrl proxy;
    if (proxy_for(u, proxy)) cli.set_proxy(proxy.host, proxy.port);
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
    cli.enable_server_certificate_verification(true);  // system CA bundle (OpenSSL defaults)
#endif
    httplib::Headers headers{{"Accept-Encoding", "identity"}, {"User-Agent", "nanochat/" NANOCHAT_VERSION}};
    if (range_from > 0) headers.emplace("Range", "bytes=" + std::to_string(range_from) + "-");
    if (range_from > 0 && !opts.if_range.empty()) headers.emplace("If-Range", opts.if_range);

    std::string location;
    bool started = false, stopped = false;
    auto on_response = [&](const httplib::Response& r) {
      out.status = r.status;
      answered.push_back(u.origin());
      out.answered = answered;
      int64_t cr_start = -1, cr_total = -1;
      if (r.has_header("Content-Range")) parse_content_range(r.get_header_value("Content-Range"), cr_start, cr_total);
      out.body_length = header_int(r, "Content-Length");
      out.etag = r.get_header_value("ETag");
      out.last_modified = r.get_header_value("Last-Modified");
      if (r.status >= 300 && r.status < 400 && r.has_header("Location")) {
        location = r.get_header_value("Location");
        return false;
      }
      if (r.status == 416) out.total_size = cr_total;
      if (r.status != 200 && r.status != 206) {
        out.failure = HttpFailure::status;
        out.error = strprintf("HTTP %d from %s", r.status, current.c_str());
        return false;
      }
      if (r.status == 206) {
        out.body_offset = cr_start;
        out.total_size = cr_total;
      } else {
        out.body_offset = 0;
        out.total_size = out.body_length;
      }
      started = true;
      if (on_start && !on_start(out)) return stopped = true, false;
      return true;
    };
    auto on_body = [&](const char* data, size_t n) {
      out.received += (int64_t)n;
      if (!on_data(data, n)) return stopped = true, false;
      return true;
    };
    httplib::Result res = cli.Get(u.path, headers, on_response, on_body);

    if (!location.empty()) {
      if (hop >= opts.max_redirects) {
        out.failure = HttpFailure::status;
        out.error = strprintf("more than %d redirects starting at %s", opts.max_redirects, url.c_str());
        return out;
      }
      std::string next = resolve_location(u, location);
      if (u.scheme == "https" && http_parse_url(next).scheme == "http") {
        // what was asked for over TLS must not arrive in clear text (nor be altered on the way)
        out.failure = HttpFailure::refused;
        out.error = strprintf("refusing the redirect from %s to %s: https must not fall back to plain http",
                              current.c_str(), next.c_str());
        return out;
      }
      current = next;
      continue;
    }
    if (out.failure != HttpFailure::none) return out;
    if (stopped) {
      out.failure = HttpFailure::stopped;
      out.error = "stopped";
      return out;
    }
    httplib::Error err = res.error();
    if (!started && (err == httplib::Error::Connection || err == httplib::Error::ConnectionTimeout)) {
      out.failure = HttpFailure::unreachable;
      out.error = strprintf("cannot connect to %s port %d (%s)", u.host.c_str(), u.port,
                            httplib::to_string(err).c_str());
      return out;
    }
    if (err == httplib::Error::SSLServerVerification || err == httplib::Error::SSLLoadingCerts) {
      out.failure = HttpFailure::status;  // permanent: retrying will not fix a certificate
      out.error = strprintf(
          "TLS certificate of %s could not be verified (%s); check the system CA "
          "bundle (ca-certificates, or SSL_CERT_FILE)",
          u.host.c_str(), httplib::to_string(err).c_str());
      return out;
    }
    if (err != httplib::Error::Success) {
      out.failure = HttpFailure::transfer;
      out.error = strprintf("transfer from %s failed after %lld bytes (%s)", u.host.c_str(), (long long)out.received,
                            httplib::to_string(err).c_str());
      return out;
    }
    if (out.body_length >= 0 && out.received != out.body_length) {
      out.failure = HttpFailure::transfer;
      out.error = strprintf("connection to %s closed after %lld of %lld bytes", u.host.c_str(), (long long)out.received,
                            (long long)out.body_length);
    }
    return out;
  }
}

}  // namespace nanochat
