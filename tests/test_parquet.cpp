// The parquet reader against files written at test time by two independent writers
// (pyarrow and duckdb, tests/fixtures/make_parquet_fixtures.py): rows must equal the data
// the writers were given, the footer must match what pyarrow reports; corrupt, truncated
// and unsupported files must give a ParquetError naming the file (and where it can, the
// row group and column), never a crash.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <thread>

#include "nanochat/parquet.h"
#include "parquet/encodings.h"  // internal: the decoders on hand-made bytes
#include "test_util.h"

using nanochat::ParquetError;
using nanochat::ParquetFile;
using nlohmann::json;

static const std::string kDir = NANOCHAT_PARQUET_FIXTURES;

static const json& expected() {
  static json e = [] {
    std::string path = kDir + "/expected.json";
    if (read_file(path).empty()) {  // not run through ctest's fixture step: generate now
      auto r = run_shell(std::string(NANOCHAT_PYTHON) + " " + NANOCHAT_PARQUET_FIXTURE_SCRIPT + " " + kDir);
      if (r.rc != 0) throw std::runtime_error("fixture generator failed: " + r.err);
    }
    return json::parse(read_file(path));
  }();
  return e;
}

static std::vector<json> read_all_rows(const ParquetFile& f, const std::vector<std::string>& columns = {}) {
  std::vector<json> rows;
  for (int g = 0; g < f.num_row_groups(); g++)
    for (auto& r : f.read_rows_json(g, columns)) rows.push_back(std::move(r));
  return rows;
}

static void expect_file_reads_as_written(const std::string& name) {
  SCOPED_TRACE(name);
  const json& rows = expected()["datasets"][expected()["files"][name].get<std::string>()];
  ParquetFile f(kDir + "/" + name);
  ASSERT_EQ(f.num_rows(), (int64_t)rows.size());
  std::vector<json> got = read_all_rows(f);
  ASSERT_EQ(got.size(), rows.size());
  int mismatches = 0;
  for (size_t i = 0; i < got.size() && mismatches < 3; i++)
    if (got[i] != rows[i]) {
      mismatches++;
      ADD_FAILURE() << "row " << i << "\n  got      " << got[i].dump() << "\n  expected " << rows[i].dump();
    }
}

static std::vector<std::string> fixture_names(const std::string& prefix) {
  std::vector<std::string> names;
  for (auto& [name, dataset] : expected()["files"].items())
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  return names;
}

TEST(Parquet, PyarrowFlatEveryCodecPageVersionAndDictionary) {
  auto names = fixture_names("flat_");
  EXPECT_EQ(names.size(), 18u);  // 4 codecs x 2 page versions x dictionary on/off + 2 delta files
  for (auto& name : names) expect_file_reads_as_written(name);
}

TEST(Parquet, PyarrowNestedListOfStructStructOfListsListOfLists) {
  auto names = fixture_names("nested_");
  EXPECT_EQ(names.size(), 5u);
  for (auto& name : names) expect_file_reads_as_written(name);
}

TEST(Parquet, DuckdbWrittenFiles) {
  auto names = fixture_names("duckdb_");
  EXPECT_EQ(names.size(), 10u);
  for (auto& name : names) expect_file_reads_as_written(name);
}

TEST(Parquet, PretrainingShardLayout) { expect_file_reads_as_written("text_shard.parquet"); }

TEST(Parquet, FooterMatchesPyarrow) {
  for (auto& [name, m] : expected()["meta"].items()) {
    SCOPED_TRACE(name);
    ParquetFile f(kDir + "/" + name);
    EXPECT_EQ(f.num_rows(), m["num_rows"].get<int64_t>());
    ASSERT_EQ(f.num_row_groups(), (int)m["row_group_rows"].size());
    for (int g = 0; g < f.num_row_groups(); g++) {
      EXPECT_EQ(f.row_group(g).num_rows, m["row_group_rows"][g].get<int64_t>());
      EXPECT_EQ(f.row_group(g).compressed_bytes, m["compressed_bytes"][g].get<int64_t>());
    }
    auto codecs = m["codecs"].get<std::vector<std::string>>();
    for (auto& c : codecs)
      if (c == "LZ4") c = "LZ4_RAW";  // pyarrow prints LZ4_RAW (what it writes) as LZ4
    EXPECT_EQ(f.row_group(0).codecs, codecs);
    EXPECT_EQ(f.top_level_names(), m["top_level"].get<std::vector<std::string>>());
    ASSERT_EQ(f.columns().size(), m["paths"].size());
    for (size_t c = 0; c < f.columns().size(); c++) {
      EXPECT_EQ(f.columns()[c].path, m["paths"][c].get<std::string>());
      EXPECT_EQ(f.columns()[c].physical_type, m["physical"][c].get<std::string>());
      EXPECT_EQ(f.columns()[c].max_definition_level, m["max_def"][c].get<int>());
      EXPECT_EQ(f.columns()[c].max_repetition_level, m["max_rep"][c].get<int>());
    }
  }
}

TEST(Parquet, ColumnStringsWithNullsNumbersAndBooleans) {
  const json& rows = expected()["datasets"]["flat"];
  for (const char* name : {"flat_zstd_v1_dict.parquet", "flat_delta_v2.parquet", "duckdb_flat_snappy.parquet"}) {
    SCOPED_TRACE(name);
    ParquetFile f(kDir + "/" + name);
    size_t base = 0;
    for (int g = 0; g < f.num_row_groups(); g++) {
      std::vector<uint8_t> nulls;
      auto s = f.read_column_strings(g, "s");
      auto ns = f.read_column_strings(g, "ns", &nulls);
      auto id = f.read_column_strings(g, "id");
      auto b = f.read_column_strings(g, "b");
      auto d = f.read_column_strings(g, "d");
      auto u32 = f.read_column_strings(g, "u32");
      ASSERT_EQ((int64_t)s.size(), f.row_group(g).num_rows);
      ASSERT_EQ(nulls.size(), s.size());
      for (size_t i = 0; i < s.size(); i++) {
        const json& r = rows[base + i];
        EXPECT_EQ(s[i], r["s"].get<std::string>());
        EXPECT_EQ(nulls[i], r["ns"].is_null() ? 1 : 0);
        EXPECT_EQ(ns[i], r["ns"].is_null() ? "" : r["ns"].get<std::string>());
        EXPECT_EQ(id[i], std::to_string(r["id"].get<int64_t>()));
        EXPECT_EQ(b[i], r["b"].get<bool>() ? "true" : "false");
        EXPECT_EQ(std::stod(d[i]), r["d"].get<double>());
        EXPECT_EQ(u32[i], std::to_string(r["u32"].get<uint64_t>()));
      }
      base += s.size();
    }
    EXPECT_EQ(base, rows.size());
  }
}

TEST(Parquet, ColumnSelectionAndSchema) {
  ParquetFile f(kDir + "/nested_zstd_v2.parquet");
  auto rows = f.read_rows_json(1, {"source", "messages"});
  const json& all = expected()["datasets"]["nested"];
  ASSERT_EQ(rows.size(), 70u);
  for (size_t i = 0; i < rows.size(); i++) {
    EXPECT_EQ(rows[i].size(), 2u);
    EXPECT_EQ(rows[i]["messages"], all[70 + i]["messages"]);
    EXPECT_EQ(rows[i]["source"], all[70 + i]["source"]);
  }
  std::string schema = f.schema_text();
  for (const char* needle :
       {"messages (LIST)", "optional BYTE_ARRAY role (STRING)", "repeated group list", "choices {"})
    EXPECT_NE(schema.find(needle), std::string::npos) << needle << " in\n" << schema;
  EXPECT_EQ(f.columns()[0].logical_type, "STRING");
}

TEST(Parquet, ConcurrentRowGroupReads) {
  ParquetFile f(kDir + "/text_shard.parquet");
  const json& rows = expected()["datasets"]["text"];
  std::vector<std::vector<std::string>> got((size_t)f.num_row_groups());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; rep++)
        for (int g = t; g < f.num_row_groups(); g += 4) got[(size_t)g] = f.read_column_strings(g, "text");
    });
  for (auto& t : threads) t.join();
  size_t i = 0;
  for (auto& group : got)
    for (auto& s : group) EXPECT_EQ(s, rows[i++]["text"].get<std::string>());
  EXPECT_EQ(i, rows.size());
}

// ---- decoders, on the examples written out in parquet-format's Encodings.md ----------

TEST(ParquetEncodings, BitPackedExampleFromTheSpec) {
  // values 0..7 at bit width 3: one bit-packed group, header (1 << 1) | 1, then 10001000 11000110 11111010
  const uint8_t data[] = {0x03, 0x88, 0xC6, 0xFA};
  uint32_t out[8];
  EXPECT_EQ(nanochat::rle_hybrid_decode(data, sizeof data, 3, 8, out), 4u);
  for (uint32_t i = 0; i < 8; i++) EXPECT_EQ(out[i], i);
  // an RLE run: 300 copies of 5 at bit width 3 (header 300 << 1 as a varint, value in one byte)
  const uint8_t rle[] = {0xD8, 0x04, 0x05};
  std::vector<uint8_t> levels(300);
  EXPECT_EQ(nanochat::rle_hybrid_decode(rle, sizeof rle, 3, 300, levels.data()), 3u);
  for (uint8_t v : levels) EXPECT_EQ(v, 5);
  EXPECT_THROW(nanochat::rle_hybrid_decode(rle, 2, 3, 300, levels.data()), ParquetError);  // value byte missing
  EXPECT_THROW(nanochat::rle_hybrid_decode(rle, sizeof rle, 3, 301, levels.data()), ParquetError);  // too few
}

TEST(ParquetEncodings, DeltaBinaryPackedExamplesFromTheSpec) {
  // example 1: 1 2 3 4 5 -> block 128, 4 miniblocks, 5 values, first 1, min delta 1, widths 0
  const uint8_t ex1[] = {0x80, 0x01, 0x04, 0x05, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00};
  std::vector<int64_t> out;
  nanochat::decode_delta_binary_packed(ex1, sizeof ex1, 5, out);
  EXPECT_EQ(out, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  // example 2: 7 5 3 1 2 3 4 5 -> deltas -2 -2 -2 1 1 1 1, min delta -2, relative 0 0 0 3 3 3 3 at width 2
  std::vector<uint8_t> ex2 = {0x80, 0x01, 0x04, 0x08, 0x0E, 0x03, 0x02, 0x00, 0x00, 0x00};
  std::vector<uint8_t> mini(32 * 2 / 8, 0);  // one miniblock of 32 values at 2 bits, zero padded
  mini[0] = 0xC0;                            // 0,0,0,3
  mini[1] = 0x3F;                            // 3,3,3,0
  ex2.insert(ex2.end(), mini.begin(), mini.end());
  out.clear();
  nanochat::decode_delta_binary_packed(ex2.data(), ex2.size(), 8, out);
  EXPECT_EQ(out, (std::vector<int64_t>{7, 5, 3, 1, 2, 3, 4, 5}));
  out.clear();
  EXPECT_THROW(nanochat::decode_delta_binary_packed(ex2.data(), ex2.size() - 1, 8, out), ParquetError);
}

// ---- errors --------------------------------------------------------------------------

static std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ParquetError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("WRONG EXCEPTION TYPE: ") + e.what();
  }
  return "";
}

static void expect_error(const std::function<void()>& fn, std::vector<std::string> needles) {
  std::string msg = error_of(fn);
  ASSERT_FALSE(msg.empty()) << "no error";
  for (auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
}

// opens and reads everything; returns "" or the ParquetError's message
static std::string read_everything(const std::string& path) {
  return error_of([&] {
    ParquetFile f(path);
    f.schema_text();
    for (int g = 0; g < f.num_row_groups(); g++) {
      f.read_rows_json(g);
      for (auto& name : f.top_level_names()) {
        const auto& cols = f.columns();
        bool flat = false;
        for (auto& c : cols) flat |= c.path == name;
        if (flat) f.read_column_strings(g, name);
      }
    }
  });
}

static void write_bytes(const std::string& path, const std::string& bytes) {
  // a new file each time: rewriting one in place makes ext4 flush it to disk on close
  unlink(path.c_str());
  std::ofstream(path, std::ios::binary).write(bytes.data(), (std::streamsize)bytes.size());
}

class ParquetErrors : public ::testing::Test {
 protected:
  void SetUp() override { dir = make_temp_dir(); }
  void TearDown() override { std::system(("rm -rf " + dir).c_str()); }
  std::string dir;
};

TEST_F(ParquetErrors, NotParquetEmptyMissingDirectory) {
  write_bytes(dir + "/hello.parquet", "hello, this is not a parquet file at all");
  expect_error([&] { ParquetFile f(dir + "/hello.parquet"); }, {dir + "/hello.parquet", "bad magic"});
  write_bytes(dir + "/empty.parquet", "");
  expect_error([&] { ParquetFile f(dir + "/empty.parquet"); }, {"empty.parquet", "only 0 bytes"});
  expect_error([&] { ParquetFile f(dir + "/missing.parquet"); }, {"missing.parquet", "cannot open"});
  expect_error([&] { ParquetFile f(dir); }, {"directory"});
}

TEST_F(ParquetErrors, UnsupportedCodecNamesFileRowGroupColumnAndCodec) {
  for (const char* codec : {"brotli", "lz4"}) {
    std::string path = kDir + "/unsupported_" + codec + ".parquet";
    ParquetFile f(path);  // the footer is fine
    expect_error([&] { f.read_column_strings(0, "text"); },
                 {path, "row group 0", "column 'text'", "unsupported compression codec"});
  }
}

TEST_F(ParquetErrors, BadArgumentsNameWhatIsWrong) {
  ParquetFile f(kDir + "/nested_zstd_v1.parquet");
  expect_error([&] { f.read_rows_json(3); }, {"no row group 3", "has 3"});
  expect_error([&] { f.read_column_strings(-1, "source"); }, {"no row group -1"});
  expect_error([&] { f.read_column_strings(0, "nope"); }, {"no column 'nope'", "messages, choices"});
  expect_error([&] { f.read_column_strings(0, "messages"); }, {"nested", "read_rows_json"});
}

TEST_F(ParquetErrors, TruncatedAtEveryOffset) {
  for (const char* name : {"text_shard.parquet", "nested_zstd_v1.parquet", "flat_delta_v2.parquet"}) {
    std::string bytes = read_file(kDir + "/" + name);
    size_t step = bytes.size() < 5000 ? 1 : 7;
    std::string path = dir + "/t.parquet";
    for (size_t n = 0; n < bytes.size(); n += step) {
      write_bytes(path, bytes.substr(0, n));
      std::string msg = read_everything(path);
      ASSERT_FALSE(msg.empty()) << name << " truncated to " << n << " bytes read without error";
      ASSERT_EQ(msg.find("WRONG EXCEPTION"), std::string::npos) << msg;
      ASSERT_NE(msg.find(path), std::string::npos) << msg;
    }
  }
}

// flips bytes in the footer and around the first page headers: a ParquetError or, when the
// byte did not matter (statistics, padding), a clean read; never another exception or a crash
TEST_F(ParquetErrors, FlippedBytesInFooterAndPageHeaders) {
  for (const char* name : {"nested_snappy_v2.parquet", "flat_gzip_v1_dict.parquet", "duckdb_nested_v2.parquet"}) {
    std::string bytes = read_file(kDir + "/" + name);
    uint32_t footer_len;
    std::memcpy(&footer_len, bytes.data() + bytes.size() - 8, 4);
    std::vector<size_t> offsets;
    for (size_t i = bytes.size() - 8 - footer_len; i < bytes.size(); i++) offsets.push_back(i);
    for (size_t i = 0; i < 300 && i < bytes.size(); i++) offsets.push_back(i);
    std::string path = dir + "/f.parquet";
    int errors = 0;
    for (size_t off : offsets) {
      const uint8_t flips[] = {0xff, 0x01, 0x80};  // one flip per byte, cycling, to stay fast
      std::string b = bytes;
      b[off] = (char)(b[off] ^ flips[off % 3]);
      write_bytes(path, b);
      std::string msg = read_everything(path);
      ASSERT_EQ(msg.find("WRONG EXCEPTION"), std::string::npos) << "byte " << off << ": " << msg;
      if (!msg.empty()) {
        errors++;
        ASSERT_NE(msg.find(path), std::string::npos) << msg;
      }
    }
    EXPECT_GT(errors, (int)offsets.size() / 4);  // many bytes (statistics, the arrow schema blob) may not matter
  }
}

TEST_F(ParquetErrors, CorruptCompressedPageNamesRowGroupColumnAndCodec) {
  std::string bytes = read_file(kDir + "/text_shard.parquet");
  // the first page's zstd frame starts with its magic 28 b5 2f fd: break the data after it
  size_t frame = bytes.find("\x28\xb5\x2f\xfd");
  ASSERT_NE(frame, std::string::npos);
  for (size_t i = frame + 8; i < frame + 40; i++) bytes[i] = (char)0xAA;
  std::string path = dir + "/bad_page.parquet";
  write_bytes(path, bytes);
  ParquetFile f(path);
  expect_error([&] { f.read_column_strings(0, "text"); }, {path, "row group 0", "column 'text'", "page 0", "ZSTD"});
  EXPECT_EQ(f.read_column_strings(1, "text").size(), 64u);  // the other row groups still read
}

// the first page header of the shard is Thrift compact: 15 00 (type DATA_PAGE), 15 <zigzag
// varint uncompressed size>, 15 <zigzag varint compressed size>; rewrite either size in place
TEST_F(ParquetErrors, WrongPageSizesInTheHeader) {
  const std::string bytes = read_file(kDir + "/text_shard.parquet");
  ASSERT_EQ(bytes.substr(4, 3), std::string("\x15\x00\x15", 3));
  size_t uncompressed_at = 7, end = uncompressed_at;
  while ((uint8_t)bytes[end] & 0x80) end++;
  size_t compressed_at = end + 2;  // past the last varint byte and the next field header
  ASSERT_EQ(bytes[end + 1], '\x15');
  auto with_varint = [&](size_t at, uint8_t last) {  // same length, so the header stays parseable
    std::string b = bytes;
    size_t i = at;
    while ((uint8_t)b[i] & 0x80) b[i++] = (char)0xfe;  // zigzag, even: a positive size
    b[i] = (char)last;
    write_bytes(dir + "/sizes.parquet", b);
    return dir + "/sizes.parquet";
  };
  expect_error([&] { ParquetFile(with_varint(compressed_at, 0x7e)).read_column_strings(0, "text"); },
               {"row group 0", "column 'text'", "compressed page size", "past the end of the column chunk"});
  expect_error([&] { ParquetFile(with_varint(uncompressed_at, 0x02)).read_column_strings(0, "text"); },
               {"row group 0", "column 'text'", "ZSTD"});  // the frame says more than the header
  expect_error([&] { ParquetFile(with_varint(uncompressed_at, 0x7e)).read_column_strings(0, "text"); },
               {"row group 0", "column 'text'", "page 0", "ZSTD page decompressed to", "header says 1040319"});
}

// hand-made footers: the Thrift caps (nesting depth, list length) and sizes past the end
TEST_F(ParquetErrors, HostileFootersHitTheCaps) {
  auto file_with_footer = [&](const std::string& footer) {
    uint32_t n = (uint32_t)footer.size();
    std::string len((const char*)&n, 4);
    std::string path = dir + "/h.parquet";
    write_bytes(path, "PAR1" + footer + len + "PAR1");
    return path;
  };
  std::string deep(2000, '\xfc');  // field +15, a struct, 2000 times
  expect_error([&] { ParquetFile f(file_with_footer(deep)); }, {"corrupt Thrift", "nested too deeply"});
  // field 2 (schema) a list of structs claiming 2^32-1 elements
  std::string huge = std::string("\x29\xfc\xff\xff\xff\xff\x0f", 7) + std::string(16, '\0');
  expect_error([&] { ParquetFile f(file_with_footer(huge)); }, {"corrupt Thrift", "list too long"});
  std::string longer = std::string("\x29\xfc\x80\x02", 4) + std::string(16, '\0');  // 256 elements, 16 bytes
  expect_error([&] { ParquetFile f(file_with_footer(longer)); }, {"list longer than the bytes left"});
  std::string bytes = read_file(kDir + "/text_shard.parquet");
  uint32_t big = 0x7fffffff;
  std::memcpy(&bytes[bytes.size() - 8], &big, 4);
  write_bytes(dir + "/len.parquet", bytes);
  expect_error([&] { ParquetFile f(dir + "/len.parquet"); }, {"footer length 2147483647 larger than the file"});
}

// ---- bounds: what a small file may ask for ----------------------------------------------

// the hand-made hostile files of the fuzz corpus (tests/fuzz/make_seeds.py says how each is
// built): each used to ask for a GB or more; now each is one ParquetError naming the file,
// row group, column and page, and the process grows by far less than the old demand
// the seed corpus of the parquet fuzzer, in the source tree (__FILE__ is relative under ccache)
static const std::string kFuzzDir = std::string(NANOCHAT_SOURCE_DIR) + "/tests/fuzz/parquet";

static long peak_rss_mb() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

TEST(ParquetBounds, RleRunsOfLevelsCannotClaimBillionsOfValues) {
  // 32 pages, each one RLE run of 2^26 null levels: 2^31 - 1 rows in 1 KB
  std::string path = kFuzzDir + "/regress-rle-levels.parquet";
  ParquetFile f(path);
  ASSERT_EQ(f.num_rows(), (int64_t(1) << 31) - 1);
  long before = peak_rss_mb();
  expect_error([&] { f.read_rows_json(0); },
               {path, "row group 0", "column 'x'", "2147483647 values", "more than the row group's bytes can hold"});
  expect_error([&] { f.read_column_strings(0, "x"); }, {path, "column 'x'", "can hold"});
  EXPECT_LT(peak_rss_mb() - before, 64);  // the old reader kept 2 GB of levels, then built rows
}

TEST(ParquetBounds, DictionaryOutputIsBoundedByTheCompressedBytes) {
  // one 1000-byte dictionary string, then 2^20 indices to it in one RLE run: 1 GB of strings
  std::string path = kFuzzDir + "/regress-dictionary-strings.parquet";
  ParquetFile f(path);
  long before = peak_rss_mb();
  expect_error([&] { f.read_column_strings(0, "s"); },
               {path, "row group 0", "column 's'", "page 1", "1048576000 bytes of strings", "can hold"});
  EXPECT_LT(peak_rss_mb() - before, 64);  // refused before a single copy
}

TEST(ParquetBounds, DeclaredPageSizeIsBoundedByTheCodec) {
  // a zstd frame of a few bytes under a page header that says 2^30 - 1 bytes
  std::string path = kFuzzDir + "/regress-zstd-page-size.parquet";
  ParquetFile f(path);
  expect_error(
      [&] { f.read_column_strings(0, "x"); },
      {path, "column 'x'", "page 0", "page header says 1073741823 bytes", "compressed bytes of ZSTD can hold"});
}

// the densest files a real writer makes stay inside the bounds: pyarrow, 3 million rows of an
// all-null column, a constant int and a constant string (a few hundred levels per byte)
TEST(ParquetBounds, DensestPyarrowColumnsStillRead) {
  std::string dir = make_temp_dir(), path = dir + "/dense.parquet";
  auto r = run_shell(std::string(NANOCHAT_PYTHON) +
                     " -c \"import pyarrow as pa, pyarrow.parquet as pq; n = 3 * 10**6; "
                     "pq.write_table(pa.table({'x': pa.nulls(n, pa.int64()), 'i': pa.array([7] * n), "
                     "'s': pa.array(['en'] * n)}), '" +
                     path + "', row_group_size=n)\"");
  ASSERT_EQ(r.rc, 0) << r.err;
  ParquetFile f(path);
  ASSERT_EQ(f.row_group(0).num_rows, 3000000);
  EXPECT_LT(f.row_group(0).compressed_bytes, 3000000 / 64);  // dense: far under a byte a row
  std::vector<uint8_t> nulls;
  std::vector<std::string> x = f.read_column_strings(0, "x", &nulls);
  EXPECT_EQ(std::count(nulls.begin(), nulls.end(), 1), 3000000);
  std::vector<std::string> i = f.read_column_strings(0, "i"), s = f.read_column_strings(0, "s");
  EXPECT_EQ(std::count(i.begin(), i.end(), "7"), 3000000);
  EXPECT_EQ(std::count(s.begin(), s.end(), "en"), 3000000);
  std::system(("rm -rf " + dir).c_str());
}

// ---- the CLI ---------------------------------------------------------------------------

static const std::string kBin = NANOCHAT_BIN;

TEST(ParquetInspect, SummaryAndRowsAsJsonLines) {
  std::string path = kDir + "/nested_zstd_v1.parquet";
  auto r = run_shell(kBin + " inspect " + path);
  ASSERT_EQ(r.rc, 0) << r.err;
  int64_t total = 0;  // pyarrow's count of the compressed bytes
  for (auto& n : expected()["meta"]["nested_zstd_v1.parquet"]["compressed_bytes"]) total += n.get<int64_t>();
  std::string total_line = "total: " + std::to_string(total) + " B compressed";
  for (std::string needle : {std::string("rows: 200 in 3 row group(s)"), std::string("row group 2: 60 rows"),
                             total_line, std::string("parquet-cpp-arrow"), std::string("messages (LIST)"),
                             std::string("grid.list.element.list.element       INT32      -        5/2     ZSTD")})
    EXPECT_NE(r.out.find(needle), std::string::npos) << needle << " in\n" << r.out;
  r = run_shell(kBin + " inspect " + path + " --rows 75 --columns messages,source");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::istringstream lines(r.out);
  const json& rows = expected()["datasets"]["nested"];
  int n = 0;
  for (std::string line; std::getline(lines, line); n++) {
    json row = json::parse(line);
    EXPECT_EQ(row, (json{{"messages", rows[n]["messages"]}, {"source", rows[n]["source"]}})) << line;
  }
  EXPECT_EQ(n, 75);  // crosses from row group 0 into 1
  r = run_shell(kBin + " inspect " + path + " --rows 2 --row-group 2");
  EXPECT_EQ(json::parse(r.out.substr(0, r.out.find('\n'))), rows[140]);
  EXPECT_EQ(count_lines(r.out), 2);
}

TEST(ParquetInspect, BadFileIsOneErrorLineAndExit1) {
  std::string dir = make_temp_dir();
  write_bytes(dir + "/x.parquet", "PAR1 definitely not");
  for (std::string args : {dir + "/x.parquet", dir + "/none.parquet", kDir + "/unsupported_brotli.parquet --rows 1",
                           kDir + "/text_shard.parquet --rows 1 --row-group 9"}) {
    auto r = run_shell(kBin + " inspect " + args);
    EXPECT_EQ(r.rc, 1) << args;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  }
  std::system(("rm -rf " + dir).c_str());
}
