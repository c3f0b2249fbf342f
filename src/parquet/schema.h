// The schema tree rebuilt from the footer's flat, depth-first list of elements, with each
// node's definition and repetition levels (how many optional/repeated ancestors it has,
// itself included) and the leaves below it.
#pragma once
#include <string>
#include <vector>

#include "parquet/metadata.h"

namespace nanochat {

struct SchemaNode {
  SchemaElement element;
  int def_level = 0, rep_level = 0;
  std::vector<int> children;  // node indices
  std::vector<int> leaves;    // leaf column indices under this node, in file order
  int leaf = -1;              // leaf column index when this node is a leaf
  std::string path;           // dotted, from the root (root excluded)
};

struct Schema {
  std::vector<SchemaNode> nodes;  // nodes[0] is the root
  std::vector<int> leaf_nodes;    // node index of each leaf column
};

Schema schema_build(const std::vector<SchemaElement>& elements);
std::string schema_text(const Schema& schema);  // an indented tree, one node per line

}  // namespace nanochat
