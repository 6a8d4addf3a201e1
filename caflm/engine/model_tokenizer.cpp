#include "caflm/engine/model_tokenizer.hpp"

#include <fmt/format.h>
#include <stdexcept>

#include "caflm/engine/log.hpp"
#include "caflm/model/model.hpp"
#include "caflm/text/tokenizer.hpp"
#include "caflm/text/vocabulary.hpp"

namespace caflm {

std::shared_ptr<const Tokenizer> load_tokenizer(const Model& model) {
  auto vocabulary = std::make_shared<const Vocabulary>(Vocabulary::from_gguf(model.file()));
  if (vocabulary->size() > model.config().vocab_size)
    throw std::runtime_error(fmt::format(
        "the tokenizer has {} tokens, more than the {} rows of the model's embedding table",
        vocabulary->size(), model.config().vocab_size));
  if (!vocabulary->pre_tokenizer_warning().empty())
    log(LogLevel::Warning, std::string_view(vocabulary->pre_tokenizer_warning()));
  return std::make_shared<const Tokenizer>(std::move(vocabulary));
}

} // namespace caflm
