// One streaming HTTP(S) GET over cpp-httplib: an optional "Range: bytes=N-" (with If-Range,
// so a file that changed on the server comes whole instead of as a spliced tail), redirects
// followed by hand (to any host, with a hop limit, never from https down to http) so every
// hop gets the same timeouts and certificate checks, and the body handed over chunk by
// chunk. Honours https_proxy, http_proxy and no_proxy (never for loopback). Internal to the
// dataset module.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace nanochat {

struct HttpUrl {
  std::string scheme, host, path;  // scheme "http" or "https"; path starts with '/'
  int port = 0;
  std::string origin() const;  // "https://host:443"
};
HttpUrl http_parse_url(const std::string& url);  // Error on anything else

struct HttpGetOptions {
  int connect_timeout_seconds = 30, read_timeout_seconds = 30, max_redirects = 10;
  // with a range: "If-Range: <if_range>" (an ETag or an HTTP date), so the server answers
  // 200 with the whole file unless its copy still has that validator
  std::string if_range;
};

// refused: a redirect from https to http (permanent, like a certificate error)
enum class HttpFailure { none, unreachable, transfer, status, stopped, refused };

struct HttpGetResult {
  HttpFailure failure = HttpFailure::none;
  std::string error;                  // what went wrong, for messages
  std::string final_url;              // after redirects
  int status = 0;                     // of the final response
  int64_t body_offset = 0;            // where the body starts in the file: Content-Range start, else 0
  int64_t total_size = -1;            // the whole file's size (Content-Range total, or Content-Length of a 200)
  int64_t body_length = -1;           // Content-Length of this response, -1 when not given
  int64_t received = 0;               // body bytes handed to on_data
  std::string etag, last_modified;    // the final response's validators ("" when not sent)
  std::vector<std::string> answered;  // origins that sent a response (every hop)
};

// on_start sees the final response's headers (status, offsets); returning false stops the
// transfer (failure = stopped). on_data returning false stops it too.
HttpGetResult http_get(const std::string& url, int64_t range_from, const HttpGetOptions& opts,
                       const std::function<bool(const HttpGetResult&)>& on_start,
                       const std::function<bool(const char*, size_t)>& on_data);

}  // namespace nanochat
