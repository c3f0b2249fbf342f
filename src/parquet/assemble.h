// Rebuilding rows from leaf columns (Dremel record assembly): each leaf column is a stream
// of (repetition level, definition level, value) entries; the definition level says how
// deep the path is present (null or empty list above that), the repetition level at which
// repeated field a new item starts (0 = a new row). LIST groups become JSON arrays, other
// groups JSON objects, missing optional values JSON null.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "parquet/column_reader.h"
#include "parquet/schema.h"

namespace nanochat {

// rows of the given top-level nodes; leaf_data[leaf] must be filled for every leaf under them
std::vector<nlohmann::json> assemble_rows(const Schema& schema, const std::vector<int>& top_nodes,
                                          const std::vector<const ColumnData*>& leaf_data, int64_t num_rows);

// value i (an index into the leaf's non-null values) as JSON / as a string
nlohmann::json leaf_value_json(const SchemaElement& leaf, const ColumnValues& values, int64_t i);
std::string leaf_value_string(const SchemaElement& leaf, const ColumnValues& values, int64_t i);

}  // namespace nanochat
