// download_file and `nanochat download` against local servers (tests/http_test_server.h):
// resume after a dropped connection, retry after a 500, a redirect to another server, a
// corrupt file that fails verification, an unreachable host, and two downloaders at once;
// a partial file continued only while the server's ETag / Last-Modified is unchanged, no
// redirect from https down to http, and a size cap per file.
// Shards are real parquet files written by pyarrow. No network beyond 127.0.0.1.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thread>

#include "http_test_server.h"
#include "nanochat/common/files.h"
#include "nanochat/common/progress.h"
#include "nanochat/dataset.h"
#include "test_util.h"

using namespace nanochat;

static const std::string kBin = NANOCHAT_BIN;
static const std::string kPython = NANOCHAT_PYTHON;
static const std::string kFixtures = NANOCHAT_FIXTURES;

// a ClimbMix-like shard written by pyarrow (made once per prefix, kept for the test run)
static std::string shard_bytes(const std::string& prefix, int rows = 3000) {
  static std::map<std::string, std::string> cache;
  if (cache.count(prefix)) return cache[prefix];
  std::string dir = make_temp_dir(), path = dir + "/s.parquet";
  auto r = run_shell(kPython + " " + kFixtures + "/make_text_parquet.py " + path + " " + std::to_string(rows) +
                     " 1024 " + prefix);
  EXPECT_EQ(r.rc, 0) << r.err;
  std::string bytes = read_file(path);
  remove_tree(dir);
  EXPECT_GT(bytes.size(), 50000u);
  return cache[prefix] = bytes;
}

// a self-signed certificate for 127.0.0.1 by the openssl command: dir/cert.pem and dir/key.pem
static CommandResult make_self_signed_cert(const std::string& dir) {
  return run_shell(
      "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 -addext "
      "subjectAltName=IP:127.0.0.1 -keyout " +
      dir + "/key.pem -out " + dir + "/cert.pem");
}

static int closed_port() {  // a port nobody listens on: bind, read the port, close
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, (sockaddr*)&a, sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, (sockaddr*)&a, &len);
  close(fd);
  return ntohs(a.sin_port);
}

static DownloadOptions fast_options() {
  DownloadOptions o;
  o.retry_base_seconds = 0.01;
  o.connect_timeout_seconds = o.read_timeout_seconds = 5;
  o.verify = download_verify_parquet;
  return o;
}

TEST(Download, ResumesAfterRedirect500AndDroppedConnection) {
  std::string body = shard_bytes("a");
  TestServer a, b;
  a.files["/d/shard_00000.parquet"] = b.files["/d/shard_00000.parquet"] = body;
  a.redirects = 1, a.redirect_base = b.url();  // 1st: a -> 302 -> b, which answers 500
  b.fail_500 = 1;
  a.drops = 1, a.drop_at = (long long)body.size() / 2;  // 2nd: a drops half-way; 3rd: a resumes
  std::string dir = make_temp_dir(), path = dir + "/x/shard_00000.parquet";
  int64_t bytes_reported = 0, total_reported = -1;
  DownloadOptions o = fast_options();
  o.on_bytes = [&](int64_t d) { bytes_reported += d; };
  o.on_total = [&](int64_t t) { total_reported = t; };

  EXPECT_EQ(download_file(a.url("/d/shard_00000.parquet"), path, o), DownloadOutcome::downloaded);
  EXPECT_TRUE(read_file(path) == body) << "downloaded bytes differ from the served file";
  EXPECT_EQ(bytes_reported, (int64_t)body.size());
  EXPECT_EQ(total_reported, (int64_t)body.size());
  EXPECT_FALSE(path_exists(path + ".tmp"));
  EXPECT_FALSE(path_exists(path + ".lock"));

  auto ra = a.requests(), rb = b.requests();
  ASSERT_EQ(ra.size(), 3u);
  EXPECT_EQ(ra[0].status, 302);
  EXPECT_EQ(ra[1].status, 200);
  EXPECT_EQ(ra[1].range_from, -1);
  EXPECT_EQ(ra[2].status, 206);
  EXPECT_EQ(ra[2].range_from, a.drop_at) << "the retry must continue the partial file, not start over";
  ASSERT_EQ(rb.size(), 1u);
  EXPECT_EQ(rb[0].status, 500);
  remove_tree(dir);
}

TEST(Download, ContinuesAPartialTmpFromAnEarlierRun) {
  std::string body = shard_bytes("a");
  TestServer s;
  s.files["/shard_00001.parquet"] = body;
  std::string dir = make_temp_dir(), path = dir + "/shard_00001.parquet";
  size_t have = 12345;
  { std::ofstream(path + ".tmp", std::ios::binary) << body.substr(0, have); }
  { std::ofstream(path + ".tmp.validator") << s.etag << "\n"; }  // the ETag its bytes came with
  EXPECT_EQ(download_file(s.url("/shard_00001.parquet"), path, fast_options()), DownloadOutcome::downloaded);
  EXPECT_TRUE(read_file(path) == body);
  EXPECT_FALSE(path_exists(path + ".tmp.validator"));
  auto r = s.requests();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].range_from, (long long)have);
  EXPECT_EQ(r[0].if_range, s.etag);
  EXPECT_EQ(r[0].status, 206);

  // a .tmp that already holds every byte (a run killed before the rename): 416, then verified
  std::string path2 = dir + "/again.parquet";
  { std::ofstream(path2 + ".tmp", std::ios::binary) << body; }
  { std::ofstream(path2 + ".tmp.validator") << s.etag << "\n"; }
  EXPECT_EQ(download_file(s.url("/shard_00001.parquet"), path2, fast_options()), DownloadOutcome::downloaded);
  EXPECT_TRUE(read_file(path2) == body);
  // and a file already in place is not fetched again
  EXPECT_EQ(download_file(s.url("/shard_00001.parquet"), path, fast_options()), DownloadOutcome::already_present);
  EXPECT_EQ(s.requests().size(), 2u);
  remove_tree(dir);
}

TEST(Download, AServerIgnoringRangeRestartsTheFileFromScratch) {
  std::string body = shard_bytes("a");
  TestServer s;
  s.files["/shard_00000.parquet"] = body;
  s.ignore_range = true;
  std::string dir = make_temp_dir(), path = dir + "/shard_00000.parquet";
  { std::ofstream(path + ".tmp", std::ios::binary) << std::string(5000, 'z'); }  // not a prefix of body
  { std::ofstream(path + ".tmp.validator") << s.etag << "\n"; }
  int64_t reported = 0;
  DownloadOptions o = fast_options();
  o.on_bytes = [&](int64_t d) { reported += d; };
  EXPECT_EQ(download_file(s.url("/shard_00000.parquet"), path, o), DownloadOutcome::downloaded);
  EXPECT_TRUE(read_file(path) == body) << "old partial bytes were kept in front of a full response";
  EXPECT_EQ(reported, (int64_t)body.size());
  auto r = s.requests();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].range_from, 5000);
  remove_tree(dir);
}

TEST(Download, CorruptContentOfTheRightLengthFailsVerification) {
  std::string body = shard_bytes("a");
  std::string bad(body.size(), 'x');  // right length, not parquet
  TestServer s;
  s.files["/shard_00000.parquet"] = bad;
  std::string dir = make_temp_dir(), path = dir + "/shard_00000.parquet";
  DownloadOptions o = fast_options();
  o.max_attempts = 2;
  try {
    download_file(s.url("/shard_00000.parquet"), path, o);
    ADD_FAILURE() << "a corrupt file was accepted";
  } catch (const DownloadError& e) {
    EXPECT_FALSE(e.unreachable);
    EXPECT_NE(std::string(e.what()).find("verification"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(path_exists(path));
  EXPECT_FALSE(path_exists(path + ".tmp")) << "bad bytes must not be resumed later";
  EXPECT_EQ(s.requests().size(), 2u);  // retried once, fetched from scratch
  remove_tree(dir);
}

TEST(Download, MissingFileIsNotRetried) {
  TestServer s;
  std::string dir = make_temp_dir();
  try {
    download_file(s.url("/nope.parquet"), dir + "/nope.parquet", fast_options());
    ADD_FAILURE() << "no error for a 404";
  } catch (const DownloadError& e) {
    EXPECT_NE(std::string(e.what()).find("HTTP 404"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.requests().size(), 1u);
  EXPECT_FALSE(path_exists(dir + "/nope.parquet"));
  remove_tree(dir);
}

TEST(Download, UnreachableHostFailsAtOnce) {
  std::string dir = make_temp_dir(), url = "http://127.0.0.1:" + std::to_string(closed_port()) + "/shard_00000.parquet";
  DownloadOptions o;  // default 2 s backoff: retrying would take 30 s
  o.connect_timeout_seconds = 5;
  Timer t;
  try {
    download_file(url, dir + "/shard_00000.parquet", o);
    ADD_FAILURE() << "no error";
  } catch (const DownloadError& e) {
    EXPECT_TRUE(e.unreachable) << e.what();
    EXPECT_NE(std::string(e.what()).find(url), std::string::npos) << e.what();
  }
  EXPECT_LT(t.seconds(), 1.9);
  EXPECT_FALSE(path_exists(dir + "/shard_00000.parquet"));
  remove_tree(dir);
}

TEST(Download, AnUnreachableRedirectTargetIsRetriedNotCalledOffline) {
  TestServer s;  // answers, but sends everyone to a server that is down
  s.redirects = 100, s.redirect_base = "http://127.0.0.1:" + std::to_string(closed_port());
  std::string dir = make_temp_dir();
  try {
    download_file(s.url("/shard_00000.parquet"), dir + "/shard_00000.parquet", fast_options());
    ADD_FAILURE() << "no error";
  } catch (const DownloadError& e) {
    EXPECT_FALSE(e.unreachable) << e.what();
    EXPECT_NE(std::string(e.what()).find("after 5 attempts"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.requests().size(), 5u);
  remove_tree(dir);
}

// polls cond every 5 ms for at most `seconds`
template <class F>
static bool wait_for(F&& cond, double seconds = 20) {
  Timer t;
  while (!cond()) {
    if (t.seconds() > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(Download, TwoThreadsOneDownload) {
  std::string body = shard_bytes("a");
  TestServer s;
  s.files["/shard_00000.parquet"] = body;
  s.hold = true;  // the first download stalls until the second one is surely waiting
  std::string dir = make_temp_dir(), path = dir + "/shard_00000.parquet";
  DownloadOutcome r1{}, r2{};
  std::thread t1([&] { r1 = download_file(s.url("/shard_00000.parquet"), path, fast_options()); });
  EXPECT_TRUE(wait_for([&] { return s.requests().size() == 1; }));
  std::thread t2([&] { r2 = download_file(s.url("/shard_00000.parquet"), path, fast_options()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // without a lock, t2 would request now
  s.hold = false;
  t1.join();
  t2.join();
  EXPECT_EQ(r1, DownloadOutcome::downloaded);
  EXPECT_EQ(r2, DownloadOutcome::already_present);
  EXPECT_EQ(s.requests().size(), 1u);
  EXPECT_TRUE(read_file(path) == body);
  remove_tree(dir);
}

// HTTPS with certificate checks on: a self-signed certificate is refused, and accepted once
// it is in the CA bundle OpenSSL uses (SSL_CERT_FILE, like a corporate CA would be)
TEST(Download, HttpsVerifiesTheServerCertificate) {
  if (run_shell("command -v openssl").rc != 0) GTEST_SKIP() << "the openssl command is needed to make a certificate";
  std::string dir = make_temp_dir();
  auto r = make_self_signed_cert(dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string body = shard_bytes("a");
  TestServer s(dir + "/cert.pem", dir + "/key.pem");
  s.files["/shard_00000.parquet"] = body;
  std::string path = dir + "/shard_00000.parquet";
  try {
    download_file(s.url("/shard_00000.parquet"), path, fast_options());
    ADD_FAILURE() << "a self-signed certificate was accepted";
  } catch (const DownloadError& e) {
    EXPECT_NE(std::string(e.what()).find("certificate"), std::string::npos) << e.what();
    std::printf("%s\n", e.what());
  }
  EXPECT_FALSE(path_exists(path));
  EXPECT_EQ(s.requests().size(), 0u);
  setenv("SSL_CERT_FILE", (dir + "/cert.pem").c_str(), 1);
  EXPECT_EQ(download_file(s.url("/shard_00000.parquet"), path, fast_options()), DownloadOutcome::downloaded);
  unsetenv("SSL_CERT_FILE");
  EXPECT_TRUE(read_file(path) == body);
  remove_tree(dir);
}

TEST(Download, GoesThroughHttpProxyButNeverForLoopback) {
  std::string body = shard_bytes("a");
  TestServer proxy;
  proxy.files["http://shards.invalid:8080/shard_00000.parquet"] = body;  // what a proxy is asked for
  std::string dir = make_temp_dir();
  setenv("http_proxy", proxy.url().c_str(), 1);
  EXPECT_EQ(download_file("http://shards.invalid:8080/shard_00000.parquet", dir + "/a.parquet", fast_options()),
            DownloadOutcome::downloaded);
  EXPECT_TRUE(read_file(dir + "/a.parquet") == body);
  setenv("no_proxy", "example.com,.invalid", 1);
  EXPECT_THROW(download_file("http://shards.invalid:8080/shard_00000.parquet", dir + "/b.parquet", fast_options()),
               DownloadError);
  unsetenv("no_proxy");
  TestServer direct;
  direct.files["/shard_00000.parquet"] = body;
  EXPECT_EQ(download_file(direct.url("/shard_00000.parquet"), dir + "/c.parquet", fast_options()),
            DownloadOutcome::downloaded);
  unsetenv("http_proxy");
  EXPECT_EQ(proxy.requests().size(), 1u);
  EXPECT_EQ(direct.requests().size(), 1u);
  remove_tree(dir);
}

// ---- a partial file and its validator, redirects to http, the size cap ----------------------

// the first call drops half-way (one attempt only), leaving .tmp and its validator; between
// the calls the server's file changes (body and validator) or not
struct PartialThenResume {
  std::string dir = make_temp_dir(), path = dir + "/shard_00000.parquet";
  DownloadOptions once = fast_options();
  PartialThenResume() { once.max_attempts = 1; }
  ~PartialThenResume() { remove_tree(dir); }
  void first_call_drops(TestServer& s, const std::string& body) {
    s.files["/shard_00000.parquet"] = body;
    s.drops = 1, s.drop_at = (long long)body.size() / 2;
    EXPECT_THROW(download_file(s.url("/shard_00000.parquet"), path, once), DownloadError);
    EXPECT_EQ(read_file(path + ".tmp").size(), (size_t)s.drop_at);
  }
};

TEST(DownloadResume, AChangedETagRestartsTheFileAnUnchangedOneContinuesIt) {
  std::string a = shard_bytes("a"), b = shard_bytes("b", 3500);
  DownloadOptions o = fast_options();
  o.verify = nullptr;  // so a spliced file would stay spliced, not be caught and refetched
  {
    TestServer s;
    s.etag = "\"a1\"";
    PartialThenResume p;
    p.first_call_drops(s, a);
    EXPECT_EQ(read_file(p.path + ".tmp.validator"), "\"a1\"\n");
    s.files["/shard_00000.parquet"] = b;  // a new version of the file on the server
    s.etag = "\"b1\"";
    EXPECT_EQ(download_file(s.url("/shard_00000.parquet"), p.path, o), DownloadOutcome::downloaded);
    EXPECT_TRUE(read_file(p.path) == b) << "the old partial bytes were spliced onto the new file";
    auto r = s.requests();
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[1].range_from, s.drop_at);
    EXPECT_EQ(r[1].if_range, "\"a1\"");
    EXPECT_EQ(r[1].status, 200);
    EXPECT_FALSE(path_exists(p.path + ".tmp.validator"));
  }
  {
    TestServer s;
    PartialThenResume p;
    p.first_call_drops(s, a);
    EXPECT_EQ(download_file(s.url("/shard_00000.parquet"), p.path, o), DownloadOutcome::downloaded);
    EXPECT_TRUE(read_file(p.path) == a);
    auto r = s.requests();
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[1].status, 206) << "an unchanged file must be continued, not fetched again";
    EXPECT_EQ(r[1].if_range, "\"v1\"");
  }
}

// a weak ETag cannot validate a range (RFC 9110): Last-Modified is used, and a new date restarts
TEST(DownloadResume, LastModifiedWhenTheETagIsWeak) {
  std::string a = shard_bytes("a"), b = shard_bytes("b", 3500);
  TestServer s;
  s.etag = "W/\"weak\"";
  s.last_modified = "Tue, 01 Dec 2026 10:00:00 GMT";
  PartialThenResume p;
  p.first_call_drops(s, a);
  EXPECT_EQ(read_file(p.path + ".tmp.validator"), s.last_modified + "\n");
  s.files["/shard_00000.parquet"] = b;
  s.last_modified = "Tue, 01 Dec 2026 11:00:00 GMT";
  DownloadOptions o = fast_options();
  o.verify = nullptr;
  EXPECT_EQ(download_file(s.url("/shard_00000.parquet"), p.path, o), DownloadOutcome::downloaded);
  EXPECT_TRUE(read_file(p.path) == b);
  auto r = s.requests();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].if_range, "Tue, 01 Dec 2026 10:00:00 GMT");
  EXPECT_EQ(r[1].status, 200);
}

// a partial file that nothing shows to be still current starts over: from a server without
// validators, and from one whose ETag has a percent-encoded CR LF (cpp-httplib 0.11.4 decodes
// it), which is never kept or sent back: it would inject a header into the resumed request
TEST(DownloadResume, WithoutAUsableValidatorThePartialFileIsFetchedAgain) {
  for (const char* etag : {"", "\"v1%0D%0AX-Injected: 1\""}) {
    SCOPED_TRACE(std::string("ETag ") + etag);
    std::string a = shard_bytes("a");
    TestServer s;
    s.etag = etag;
    s.last_modified = "";
    PartialThenResume p;
    p.first_call_drops(s, a);
    EXPECT_FALSE(path_exists(p.path + ".tmp.validator"));
    EXPECT_EQ(download_file(s.url("/shard_00000.parquet"), p.path, fast_options()), DownloadOutcome::downloaded);
    EXPECT_TRUE(read_file(p.path) == a);
    auto r = s.requests();
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[1].if_range, "");
    EXPECT_EQ(r[1].range_from, -1);
    EXPECT_EQ(r[1].status, 200);
  }
}

TEST(DownloadRedirect, HttpsToHttpIsRefusedHttpsToHttpsIsFollowed) {
  if (run_shell("command -v openssl").rc != 0) GTEST_SKIP() << "the openssl command is needed to make a certificate";
  std::string dir = make_temp_dir();
  auto r = make_self_signed_cert(dir);
  ASSERT_EQ(r.rc, 0) << r.err;
  setenv("SSL_CERT_FILE", (dir + "/cert.pem").c_str(), 1);
  std::string body = shard_bytes("a");
  TestServer secure(dir + "/cert.pem", dir + "/key.pem"), plain, secure2(dir + "/cert.pem", dir + "/key.pem");
  plain.files["/shard_00000.parquet"] = secure2.files["/shard_00000.parquet"] = body;
  secure.redirects = 1, secure.redirect_base = plain.url();
  std::string path = dir + "/shard_00000.parquet";
  try {
    download_file(secure.url("/shard_00000.parquet"), path, fast_options());
    ADD_FAILURE() << "an https -> http redirect was followed";
  } catch (const DownloadError& e) {
    EXPECT_NE(std::string(e.what()).find("refusing the redirect from " + secure.url("/shard_00000.parquet") + " to " +
                                         plain.url("/shard_00000.parquet")),
              std::string::npos)
        << e.what();
    EXPECT_FALSE(e.unreachable);
  }
  EXPECT_EQ(secure.requests().size(), 1u) << "a refused redirect is not retried";
  EXPECT_EQ(plain.requests().size(), 0u);
  EXPECT_FALSE(path_exists(path) || path_exists(path + ".tmp"));
  secure.redirects = 1, secure.redirect_base = secure2.url();
  EXPECT_EQ(download_file(secure.url("/shard_00000.parquet"), path, fast_options()), DownloadOutcome::downloaded);
  EXPECT_TRUE(read_file(path) == body);
  unsetenv("SSL_CERT_FILE");
  remove_tree(dir);
}

TEST(DownloadCap, AFileOverTheLimitIsRefusedWhetherItsSizeIsSaidOrNot) {
  std::string body = shard_bytes("a");
  std::string dir = make_temp_dir();
  for (bool chunked : {false, true}) {
    SCOPED_TRACE(chunked ? "chunked, no Content-Length" : "Content-Length");
    TestServer s;
    s.files["/shard_00000.parquet"] = body;
    s.chunked = chunked;
    DownloadOptions o = fast_options();
    o.max_file_bytes = (int64_t)body.size() - 1;
    std::string path = dir + "/shard_00000.parquet";
    try {
      download_file(s.url("/shard_00000.parquet"), path, o);
      ADD_FAILURE() << "a file over the limit was accepted";
    } catch (const DownloadError& e) {
      std::string want = chunked
                             ? "the server sent more than the limit of " + std::to_string(o.max_file_bytes) + " bytes"
                             : "the file is " + std::to_string(body.size()) + " bytes, more than the limit of " +
                                   std::to_string(o.max_file_bytes) + " bytes";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.requests().size(), 1u) << "the same file will not shrink by retrying";
    EXPECT_FALSE(path_exists(path) || path_exists(path + ".tmp") || path_exists(path + ".tmp.validator"));
    o.max_file_bytes = (int64_t)body.size();  // exactly at the limit is fine
    EXPECT_EQ(download_file(s.url("/shard_00000.parquet"), path, o), DownloadOutcome::downloaded);
    EXPECT_TRUE(read_file(path) == body);
    std::remove(path.c_str());
  }
  remove_tree(dir);
}

// ---- the real binary -------------------------------------------------------------------

TEST(DownloadCli, FetchesShardsAndTheValShardThenSkipsThem) {
  TestServer s;
  for (int id : {0, 1, kClimbmixMaxShard})
    s.files["/m/" + climbmix_shard_name(id)] = shard_bytes("s" + std::to_string(id));
  std::string base = make_temp_dir();
  std::string cmd = "NANOCHAT_BASE_DIR=" + base + " " + kBin + " download climbmix -n 2 --workers 2 --base-url " +
                    s.url("/m");
  auto r = run_shell(cmd);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  for (int id : {0, 1, kClimbmixMaxShard}) {
    std::string name = climbmix_shard_name(id);
    EXPECT_TRUE(read_file(base + "/base_data_climbmix/" + name) == s.files["/m/" + name]) << name;
  }
  EXPECT_FALSE(path_exists(base + "/base_data_climbmix/" + climbmix_shard_name(2)));
  EXPECT_EQ(s.requests().size(), 3u);
  r = run_shell(cmd);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("0 downloaded"), std::string::npos) << r.out;
  EXPECT_EQ(s.requests().size(), 3u) << "files already there were fetched again";
  remove_tree(base);
}

TEST(DownloadCli, OfflineIsOneLineAndNonZero) {
  std::string base = make_temp_dir();
  std::string url = "http://127.0.0.1:" + std::to_string(closed_port());
  auto r = run_shell("NANOCHAT_BASE_DIR=" + base + " " + kBin + " download -n 4 --base-url " + url);
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("error: cannot download " + url + "/shard_", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("network"), std::string::npos) << r.err;
  EXPECT_TRUE(dataset_list_parquet_files(base + "/base_data_climbmix").empty());
  remove_tree(base);
}

TEST(DownloadCli, TwoProcessesAtOnceDownloadEachShardOnce) {
  TestServer s;
  std::string name = climbmix_shard_name(kClimbmixMaxShard);
  s.files["/" + name] = shard_bytes("p");
  s.hold = true;  // process a's transfer stalls until process b is waiting on the lock
  std::string base = make_temp_dir();
  auto one = [&](const std::string& tag) {
    return "NANOCHAT_BASE_DIR=" + base + " " + kBin + " download -n 0 --base-url " + s.url() + " >" + base + "/" + tag +
           ".out 2>&1; echo $? >" + base + "/" + tag + ".rc";
  };
  std::thread ta([&] { run_shell(one("a")); });
  EXPECT_TRUE(wait_for([&] { return s.requests().size() == 1; }));
  std::thread tb([&] { run_shell(one("b")); });
  EXPECT_TRUE(wait_for([&] {
    return read_file(base + "/b.out").find("waiting for another process") != std::string::npos;
  })) << read_file(base + "/b.out");
  s.hold = false;
  ta.join();
  tb.join();
  EXPECT_EQ(read_file(base + "/a.rc"), "0\n") << read_file(base + "/a.out");
  EXPECT_EQ(read_file(base + "/b.rc"), "0\n") << read_file(base + "/b.out");
  EXPECT_EQ(s.requests().size(), 1u);
  EXPECT_TRUE(read_file(base + "/base_data_climbmix/" + name) == s.files["/" + name]);
  EXPECT_FALSE(path_exists(base + "/base_data_climbmix/" + name + ".lock"));
  remove_tree(base);
}

TEST(DownloadCli, RanksUnderLaunchShareTheShardsAndTheResultIsACorpus) {
  TestServer s;
  for (int id : {0, 1, 2, kClimbmixMaxShard})
    s.files["/" + climbmix_shard_name(id)] = shard_bytes("r" + std::to_string(id));
  s.chunk_sleep_ms = 5;
  std::string base = make_temp_dir();
  auto r = run_shell("NANOCHAT_BASE_DIR=" + base + " " + kBin +
                     " launch --nproc-per-node 2 -- download -n 3 --workers 2 --base-url " + s.url());
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  for (auto& kv : s.files) EXPECT_EQ(s.count(kv.first, 200), 1) << kv.first << " downloaded more than once";
  EXPECT_EQ(s.requests().size(), 4u);
  // what the downloader leaves is the default corpus: shards 0..2 train, 06542 val
  setenv("NANOCHAT_BASE_DIR", base.c_str(), 1);
  Corpus c = corpus_open(CorpusOptions());
  unsetenv("NANOCHAT_BASE_DIR");
  EXPECT_EQ(corpus_split_files(c, "train").size(), 3u);
  EXPECT_EQ(corpus_split_files(c, "val"), std::vector<std::string>({base + "/base_data_climbmix/shard_06542.parquet"}));
  DocIterator it(corpus_split(c, "val"), 0, 1, false);
  DocBatch b;
  ASSERT_TRUE(it.next(b));
  EXPECT_EQ(b.docs.size(), 1024u);
  EXPECT_EQ(b.docs[5].rfind("r6542-5 ", 0), 0u) << b.docs[5];
  remove_tree(base);
}

TEST(DownloadCli, MaxFileBytesIsAnErrorAndLeavesNothing) {
  TestServer s;
  std::string name = climbmix_shard_name(kClimbmixMaxShard);
  s.files["/" + name] = shard_bytes("p");
  std::string base = make_temp_dir();
  auto r = run_shell("NANOCHAT_BASE_DIR=" + base + " " + kBin + " download -n 0 --max-file-bytes 20KB --base-url " +
                     s.url());
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  size_t error_at = r.err.rfind("error: ");  // after the shard's own warning line
  ASSERT_NE(error_at, std::string::npos) << r.err;
  EXPECT_EQ(count_lines(r.err.substr(error_at)), 1) << r.err;
  EXPECT_NE(r.err.find("more than the limit of 20480 bytes", error_at), std::string::npos) << r.err;
  EXPECT_EQ(run_shell("ls -A " + base + "/base_data_climbmix").out, "");
  remove_tree(base);
}
