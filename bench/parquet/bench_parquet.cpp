// bench_parquet: how fast the parquet reader turns a pretraining shard (as upstream's dataset.py ships them: one zstd
// `text` column, 1024-row groups, no dictionary) into strings, against the floor of just
// decompressing the same pages with libzstd, measured in the same process. Throughput is in
// uncompressed page bytes per second for both, so the ratio reader/floor is what the reader
// adds on top of decompression (reading, page headers, splitting values, allocating strings).
//
//   bench_parquet [SHARD.parquet]   default: a ~100 MB synthetic shard, generated once
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include "nanochat/common/files.h"
#include "nanochat/parquet.h"
#include "parquet/codecs.h"
#include "parquet/column_reader.h"
#include "parquet/metadata.h"

using namespace nanochat;

static double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Page {
  std::vector<uint8_t> compressed;
  size_t uncompressed;
};

// the compressed data pages of the `text` column, found by walking the footer and page headers
static std::vector<Page> load_pages(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open %s", path.c_str());
  int64_t size = lseek(fd, 0, SEEK_END);
  uint8_t tail[8];
  pread_exact(fd, tail, 8, size - 8);
  uint32_t footer_len;
  std::memcpy(&footer_len, tail, 4);
  std::vector<uint8_t> footer(footer_len);
  pread_exact(fd, footer.data(), footer_len, size - 8 - footer_len);
  FileMeta meta = parse_file_meta(footer.data(), footer.size());
  std::vector<Page> pages;
  for (const RowGroupMeta& rg : meta.row_groups) {
    const ColumnChunkMeta& m = rg.columns.at(0);
    if (m.codec != kZstd) fail("%s: the bench wants a zstd shard", path.c_str());
    int64_t start = m.dictionary_page_offset > 0 ? std::min(m.dictionary_page_offset, m.data_page_offset)
                                                 : m.data_page_offset;
    std::vector<uint8_t> chunk((size_t)m.total_compressed_size);
    pread_exact(fd, chunk.data(), chunk.size(), start);
    for (size_t pos = 0; pos < chunk.size();) {
      size_t header_size;
      PageHeader h = parse_page_header(chunk.data() + pos, chunk.size() - pos, &header_size);
      pos += header_size;
      if (h.type == kDataPage || h.type == kDataPageV2) {
        if (h.type == kDataPageV2) fail("the bench expects data page v1, as pyarrow writes by default");
        const uint8_t* p = chunk.data() + pos;
        pages.push_back({std::vector<uint8_t>(p, p + h.compressed_page_size), (size_t)h.uncompressed_page_size});
      }
      pos += (size_t)h.compressed_page_size;
    }
  }
  close(fd);
  return pages;
}

int main(int argc, char** argv) {
  std::string path = argc > 1 ? argv[1] : std::string(NANOCHAT_BENCH_DATA) + "/text_shard_100mb.parquet";
  if (argc == 1 && !path_exists(path)) {
    make_dirs(NANOCHAT_BENCH_DATA);
    std::printf("generating %s (once)...\n", path.c_str());
    std::fflush(stdout);
    std::string cmd = std::string(NANOCHAT_PYTHON) + " " + NANOCHAT_BENCH_SCRIPT + " " + path;
    if (std::system(cmd.c_str()) != 0) fail("could not generate the bench shard: %s", cmd.c_str());
  }
  std::vector<Page> pages = load_pages(path);
  size_t total = 0, max_page = 0;
  for (auto& p : pages) {
    total += p.uncompressed;
    max_page = std::max(max_page, p.uncompressed);
  }
  ParquetFile f(path);
  std::printf("shard: %s, %.1f MB on disk, %d row groups, %zu pages, %.1f MB of page data\n", path.c_str(),
              f.file_size() / 1e6, f.num_row_groups(), pages.size(), total / 1e6);

  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  std::vector<uint8_t> out(max_page);
  double best_floor = 1e30, best_reader = 1e30;
  size_t text_bytes = 0;
  for (int rep = 0; rep < 5; rep++) {  // interleaved, best of 5: the machine is shared
    double t0 = now_s();
    for (auto& p : pages) {
      size_t got = ZSTD_decompressDCtx(dctx, out.data(), p.uncompressed, p.compressed.data(), p.compressed.size());
      if (ZSTD_isError(got) || got != p.uncompressed) fail("zstd failed on a page");
    }
    best_floor = std::min(best_floor, now_s() - t0);

    t0 = now_s();
    text_bytes = 0;
    for (int g = 0; g < f.num_row_groups(); g++) {
      std::vector<std::string> docs = f.read_column_strings(g, "text");
      for (auto& d : docs) text_bytes += d.size();
    }
    best_reader = std::min(best_reader, now_s() - t0);
  }
  ZSTD_freeDCtx(dctx);
  double floor_mbs = total / 1e6 / best_floor, reader_mbs = total / 1e6 / best_reader;
  std::printf("%-44s %10s %10s\n", "", "MB/s", "seconds");
  std::printf("%-44s %10.0f %10.3f\n", "floor: libzstd decompress of the pages", floor_mbs, best_floor);
  std::printf("%-44s %10.0f %10.3f\n", "reader: read_column_strings, every group", reader_mbs, best_reader);
  std::printf("ratio reader/floor: %.2f (goal >= 0.8); %.1f MB of text in %zu bytes of pages\n", reader_mbs / floor_mbs,
              text_bytes / 1e6, total);
  return 0;
}
