// `nanochat inspect FILE`: look at a parquet file before training on it. Prints the schema,
// the row groups with their row and byte counts and each column's codec; with --rows N, the
// first N rows (of --row-group G, or from the start) as JSON lines, only --columns if given.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "nanochat/common/error.h"
#include "nanochat/parquet.h"

namespace nanochat {

static void split_commas(const std::string& s, std::vector<std::string>& out) {
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
}

static std::string human_bytes(int64_t n) {
  if (n < 10000) return strprintf("%lld B", (long long)n);
  if (n < 10000000) return strprintf("%.1f kB", n / 1e3);
  if (n < 10000000000) return strprintf("%.1f MB", n / 1e6);
  return strprintf("%.2f GB", n / 1e9);
}

static int inspect_run(const std::string& path, int64_t rows, int row_group, const std::string& columns_flag) {
  ParquetFile f(path);
  std::vector<std::string> columns;
  split_commas(columns_flag, columns);
  if (rows > 0) {  // rows only: the output is JSON lines a script can read
    if (row_group >= f.num_row_groups())
      fail("%s: no row group %d (the file has %d)", path.c_str(), row_group, f.num_row_groups());
    int g = row_group < 0 ? 0 : row_group;
    for (int64_t printed = 0; printed < rows && g < f.num_row_groups(); g++) {
      for (const auto& row : f.read_rows_json(g, columns)) {
        if (printed++ >= rows) break;
        std::printf("%s\n", row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
      }
      if (row_group >= 0) break;
    }
    return 0;
  }
  std::printf("file: %s (%s)\n", path.c_str(), human_bytes(f.file_size()).c_str());
  if (!f.created_by().empty()) std::printf("created by: %s\n", f.created_by().c_str());
  std::printf("rows: %lld in %d row group(s)\n", (long long)f.num_rows(), f.num_row_groups());
  std::printf("schema:\n%s", f.schema_text().c_str());
  // per leaf column: types, levels, codec(s) and bytes over all row groups
  std::printf("columns:\n  %-36s %-10s %-8s %-7s %-12s %10s %12s\n", "path", "physical", "logical", "def/rep", "codec",
              "compressed", "uncompressed");
  for (size_t c = 0; c < f.columns().size(); c++) {
    const ParquetColumn& col = f.columns()[c];
    std::string codecs;
    int64_t comp = 0, uncomp = 0;
    for (int g = 0; g < f.num_row_groups(); g++) {
      const ParquetRowGroup& rg = f.row_group(g);
      if (codecs.find(rg.codecs[c]) == std::string::npos) codecs += (codecs.empty() ? "" : ",") + rg.codecs[c];
      comp += rg.column_compressed_bytes[c];
      uncomp += rg.column_uncompressed_bytes[c];
    }
    std::printf("  %-36s %-10s %-8s %d/%-5d %-12s %10s %12s\n", col.path.c_str(), col.physical_type.c_str(),
                col.logical_type.empty() ? "-" : col.logical_type.c_str(), col.max_definition_level,
                col.max_repetition_level, codecs.empty() ? "-" : codecs.c_str(), human_bytes(comp).c_str(),
                human_bytes(uncomp).c_str());
  }
  int64_t comp = 0, uncomp = 0;
  for (int g = 0; g < f.num_row_groups(); g++) {
    const ParquetRowGroup& rg = f.row_group(g);
    comp += rg.compressed_bytes;
    uncomp += rg.uncompressed_bytes;
    std::printf("row group %d: %lld rows, %s compressed, %s uncompressed\n", g, (long long)rg.num_rows,
                human_bytes(rg.compressed_bytes).c_str(), human_bytes(rg.uncompressed_bytes).c_str());
  }
  std::printf("total: %s compressed, %s uncompressed\n", human_bytes(comp).c_str(), human_bytes(uncomp).c_str());
  return 0;
}

void cli_register_inspect(CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("inspect",
                                 "Show a parquet file's schema, row groups and codecs, or its rows as JSON lines");
  static std::string path, columns;
  static int64_t rows = 0;
  static int row_group = -1;
  sub->add_option("file", path, "the parquet file")->required();
  sub->add_option("--rows", rows, "print the first N rows as JSON lines instead")->check(CLI::NonNegativeNumber);
  sub->add_option("--row-group", row_group, "only rows of this row group (with --rows)")->check(CLI::NonNegativeNumber);
  sub->add_option("--columns", columns, "only these top-level columns, comma-separated (with --rows)");
  sub->callback([&exit_code] { exit_code = inspect_run(path, rows, row_group, columns); });
}

}  // namespace nanochat
