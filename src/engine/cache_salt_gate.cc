#include "engine/cache_salt_gate.h"

#include <mutex>
#include <unordered_map>

namespace pdserve::engine {

struct CacheSaltGate::State {
  const size_t max;
  mutable std::mutex mu;
  std::unordered_map<std::string, int64_t> held;  // salt → holds (requests), > 0
  explicit State(size_t m) : max(m) {}
};

class CacheSaltGate::Hold {
 public:
  Hold(std::shared_ptr<State> s, std::string salt) : state_(std::move(s)), salt_(std::move(salt)) {}
  ~Hold() {
    std::lock_guard<std::mutex> lk(state_->mu);
    auto it = state_->held.find(salt_);
    if (--it->second == 0) state_->held.erase(it);
  }
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;

 private:
  std::shared_ptr<State> state_;
  std::string salt_;
};

CacheSaltGate::CacheSaltGate(size_t max_salts) : state_(std::make_shared<State>(max_salts)) {}
CacheSaltGate::~CacheSaltGate() = default;

Result<std::shared_ptr<CacheSaltGate::Hold>> CacheSaltGate::acquire(const std::string& salt) {
  if (salt.empty() || state_->max == 0) return std::shared_ptr<Hold>();
  {
    std::lock_guard<std::mutex> lk(state_->mu);
    auto it = state_->held.find(salt);
    if (it != state_->held.end()) {
      ++it->second;
    } else {
      if (state_->held.size() >= state_->max)
        return Status::RateLimited("Too many cache_salt namespaces in use: requests with " + std::to_string(state_->max) +
                                   " other salts are running or waiting (--max-cache-salts " +
                                   std::to_string(state_->max) + "); retry when some finish, or reuse a salt");
      state_->held.emplace(salt, 1);
    }
  }
  return std::make_shared<Hold>(state_, salt);
}

size_t CacheSaltGate::held() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->held.size();
}

size_t CacheSaltGate::max_salts() const { return state_->max; }

}  // namespace pdserve::engine
