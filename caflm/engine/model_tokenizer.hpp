#pragma once

#include <memory>

namespace caflm {

class Model;
class Tokenizer;

/// The tokenizer stored in `model`'s file. Throws std::runtime_error for a
/// vocabulary that is malformed or larger than the model's embedding table.
/// Build it once per model: replicas share it.
std::shared_ptr<const Tokenizer> load_tokenizer(const Model& model);

} // namespace caflm
