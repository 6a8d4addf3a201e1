#include "caflm/messages/type_registry.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>

#include "caflm/messages/interfaces.hpp"

namespace caflm {

void add_message_types(caf::actor_system_config& config) {
  config.add_message_type<SamplingParams>("caflm::SamplingParams");
  config.add_message_type<TokenLogprob>("caflm::TokenLogprob");
  config.add_message_type<std::vector<TokenLogprob>>("caflm::TokenLogprobs");
  config.add_message_type<std::vector<std::vector<TokenLogprob>>>("caflm::TopLogprobs");
  config.add_message_type<InferenceError>("caflm::InferenceError");
  config.add_message_type<GenerateRequest>("caflm::GenerateRequest");
  config.add_message_type<Usage>("caflm::Usage");
  config.add_message_type<TokenChunk>("caflm::TokenChunk");
  config.add_message_type<std::vector<TokenChunk>>("caflm::TokenChunks");
  config.add_message_type<TokenBatch>("caflm::TokenBatch");
  config.add_message_type<Admission>("caflm::Admission");
  config.add_message_type<LoadReport>("caflm::LoadReport");
  config.add_message_type<std::vector<LoadReport>>("caflm::LoadReports");
  config.add_message_type<CoordinatorStats>("caflm::CoordinatorStats");
  config.add_message_type<RemoteEngineStatus>("caflm::RemoteEngineStatus");
  config.add_message_type<std::vector<std::uint64_t>>("caflm::RequestIds");
  config.add_message_type<std::vector<TokenId>>("caflm::TokenIds");
  config.add_message_type<token_sink>("caflm::token_sink");
  config.add_message_type<engine_core_actor>("caflm::engine_core_actor");
  config.add_message_type<dp_coordinator_actor>("caflm::dp_coordinator_actor");
  config.load<caf::io::middleman>();
}

} // namespace caflm
