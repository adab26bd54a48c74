#include <rpclb/algorithm_state.hpp>
#include <rpclb/detail/thread_slot.hpp>

#include <algorithm>
#include <thread>
#include <vector>

namespace rpclb {
namespace {

// '\n' cannot occur in a node or balancer name.
std::string compound_key(std::string_view balancer, std::string_view key) {
    std::string name;
    name.reserve(balancer.size() + key.size() + 1);
    name.append(balancer).push_back('\n');
    name.append(key);
    return name;
}

// Finds `key` in `index` or creates its object at the end of `storage` (stable addresses).
template <class T, class Storage, class Make>
T& find_or_make(std::map<std::string, T*, std::less<>>& index, Storage& storage, std::string key,
                Make make) {
    auto it = index.find(key);
    if (it != index.end()) return *it->second;
    T& made = make(storage);
    index.emplace(std::move(key), &made);
    return made;
}

}  // namespace

AlgorithmState& AlgorithmState::instance() {
    // Never destroyed: a thread still picking while the process exits keeps valid references.
    static AlgorithmState* state = new AlgorithmState;
    return *state;
}

std::atomic<std::int64_t>& AlgorithmState::counter(std::string_view balancer, std::string_view key) {
    auto name = compound_key(balancer, key);
    std::lock_guard lock(mutex_);
    return find_or_make(counters_, counter_storage_, std::move(name),
                        [](auto& storage) -> auto& { return storage.emplace_back().value; });
}

namespace detail {

// A balancer's counters by node name; guarded by AlgorithmState's mutex.
struct BalancerCounts {
    std::map<std::string, std::shared_ptr<InFlight>, std::less<>> nodes;
};

}  // namespace detail

namespace {

detail::BalancerCounts& counts_of(
    std::map<std::string, std::unique_ptr<detail::BalancerCounts>, std::less<>>& all,
    std::string_view balancer) {
    auto it = all.find(balancer);
    if (it == all.end())
        it = all.emplace(std::string(balancer), std::make_unique<detail::BalancerCounts>()).first;
    return *it->second;
}

std::shared_ptr<detail::InFlight> counter_of(detail::BalancerCounts& counts, std::string_view node) {
    auto it = counts.nodes.find(node);
    if (it == counts.nodes.end())
        it = counts.nodes.emplace(std::string(node), std::make_shared<detail::InFlight>()).first;
    return it->second;
}

}  // namespace

const detail::BalancerCounts* AlgorithmState::balancer_counts(std::string_view balancer) {
    std::lock_guard lock(mutex_);
    return &counts_of(balancer_counts_, balancer);
}

std::shared_ptr<detail::InFlight> AlgorithmState::in_flight(std::string_view balancer, std::string_view node) {
    std::lock_guard lock(mutex_);
    return counter_of(counts_of(balancer_counts_, balancer), node);
}

std::shared_ptr<const detail::CountTable> AlgorithmState::count_table(std::string_view balancer,
                                                                      std::span<const std::string> nodes) {
    auto table = std::make_shared<detail::CountTable>();
    table->nodes.assign(nodes.begin(), nodes.end());
    table->sorted = std::is_sorted(nodes.begin(), nodes.end());
    table->counts.reserve(nodes.size());
    table->views = detail::StripeViews(nodes.size());
    std::lock_guard lock(mutex_);
    auto& counts = counts_of(balancer_counts_, balancer);
    table->owner = &counts;
    for (const auto& node : nodes) table->counts.push_back(counter_of(counts, node));
    return table;
}

void AlgorithmState::forget_in_flight(std::string_view balancer, std::span<const std::string> nodes) noexcept {
    std::lock_guard lock(mutex_);
    auto it = balancer_counts_.find(balancer);
    if (it == balancer_counts_.end()) return;
    for (const auto& node : nodes) {
        auto at = it->second->nodes.find(node);
        if (at == it->second->nodes.end()) continue;
        // Tables of older snapshots may still hold it: they then read 0 too.
        at->second->reset();
        it->second->nodes.erase(at);
    }
}

void AlgorithmState::release_in_flight(std::string_view balancer, std::string_view node) noexcept {
    std::lock_guard lock(mutex_);
    auto it = balancer_counts_.find(balancer);
    if (it == balancer_counts_.end()) return;
    auto at = it->second->nodes.find(node);
    if (at != it->second->nodes.end()) at->second->release();
}

std::size_t AlgorithmState::in_flight_entries() {
    std::lock_guard lock(mutex_);
    std::size_t entries = 0;
    for (const auto& [name, counts] : balancer_counts_) entries += counts->nodes.size();
    return entries;
}

detail::BlockCursor& AlgorithmState::cursor(std::string_view balancer, std::string_view key) {
    auto name = compound_key(balancer, key);
    std::lock_guard lock(mutex_);
    return find_or_make(cursors_, cursor_storage_, std::move(name),
                        [](auto& storage) -> auto& { return storage.emplace_back(); });
}

namespace {

// The reading of `node` in `index`, made when absent or freed. Sweeps the entries of freed
// readings when the map has doubled since the last sweep: amortised O(1) per insertion,
// and the map never holds more than twice the readings alive (plus one).
std::shared_ptr<NodeReading> reading_in(std::map<std::string, std::weak_ptr<NodeReading>, std::less<>>& index,
                                        std::size_t& swept_size, std::string_view node) {
    auto it = index.find(node);
    if (it != index.end())
        if (auto alive = it->second.lock()) return alive;
    // Each reading on its own cache line: different nodes' readings are written by
    // different pollers' completions and read by every pick.
    struct alignas(64) Slot {
        NodeReading reading;
    };
    auto slot = std::make_shared<Slot>();
    std::shared_ptr<NodeReading> made(slot, &slot->reading);
    if (it != index.end()) {
        it->second = made;
        return made;
    }
    if (index.size() >= 2 * swept_size) {
        std::erase_if(index, [](const auto& entry) { return entry.second.expired(); });
        swept_size = index.size();
    }
    index.emplace(std::string(node), made);
    return made;
}

}  // namespace

std::shared_ptr<NodeReading> AlgorithmState::reading(std::string_view node) {
    std::lock_guard lock(mutex_);
    return reading_in(readings_, readings_swept_size_, node);
}

std::shared_ptr<const detail::ReadingTable> AlgorithmState::attach_readings(const MemberSnapshot& members) noexcept {
    try {
        if (const auto* held = members.cache.readings.load(std::memory_order_acquire))
            if ((*held)->readings.size() == members.nodes.size()) return *held;
        auto table = std::make_shared<detail::ReadingTable>();
        table->readings.reserve(members.nodes.size());
        {
            std::lock_guard lock(mutex_);
            for (const auto& node : members.nodes)
                table->readings.push_back(reading_in(readings_, readings_swept_size_, node));
        }
        auto held = std::make_unique<const std::shared_ptr<const detail::ReadingTable>>(table);
        const std::shared_ptr<const detail::ReadingTable>* expected = nullptr;
        if (members.cache.readings.compare_exchange_strong(expected, held.get(), std::memory_order_acq_rel)) {
            held.release();  // the snapshot owns it now
            return table;
        }
        // Another thread attached first: use its table, so every reader shares one.
        if ((*expected)->readings.size() == members.nodes.size()) return *expected;
        return table;
    } catch (...) {
        return nullptr;
    }
}

std::size_t AlgorithmState::reading_entries() {
    std::lock_guard lock(mutex_);
    std::erase_if(readings_, [](const auto& entry) { return entry.second.expired(); });
    readings_swept_size_ = readings_.size();
    return readings_.size();
}

namespace detail {

constinit thread_local std::size_t thread_slot_plus_one = 0;

namespace {

// Which slots live threads hold. Never destroyed: threads may exit after static
// destruction has begun.
struct SlotTable {
    std::mutex mutex;
    std::vector<bool> taken = std::vector<bool>(thread_slot_count(), false);
};

SlotTable& slot_table() {
    static SlotTable* table = new SlotTable;
    return *table;
}

// The calling thread's slot; gives it back when the thread exits.
struct HeldSlot {
    std::size_t slot = thread_slot_count();

    HeldSlot() {
        auto& table = slot_table();
        std::lock_guard lock(table.mutex);
        auto free = std::find(table.taken.begin(), table.taken.end(), false);
        if (free == table.taken.end()) return;
        *free = true;
        slot = static_cast<std::size_t>(free - table.taken.begin());
    }

    ~HeldSlot() {
        // Whatever the thread still does (other thread_locals' destructors) goes through
        // the state of threads without a slot: the slot may have a new holder already.
        thread_slot_plus_one = thread_slot_count() + 1;
        if (slot == thread_slot_count()) return;
        auto& table = slot_table();
        std::lock_guard lock(table.mutex);
        table.taken[slot] = false;
    }

    HeldSlot(const HeldSlot&) = delete;
    HeldSlot& operator=(const HeldSlot&) = delete;
};

}  // namespace

std::size_t thread_slot_count() noexcept {
    static const std::size_t count =
        std::clamp<std::size_t>(2 * std::size_t{std::thread::hardware_concurrency()}, 8, 256);
    return count;
}

std::size_t claim_thread_slot() noexcept {
    // Holds the slot and gives it back when the thread exits.
    thread_local const HeldSlot held;
    thread_slot_plus_one = held.slot + 1;
    return held.slot;
}

}  // namespace detail
}  // namespace rpclb
