#include "hash_ring.hpp"

#include <boost/json/serialize.hpp>
#include <rpclb/algorithm_host.hpp>
#include <rpclb/detail/thread_rng.hpp>
#include <rpclb/groups.hpp>

#include <boost/random/taus88.hpp>
#include <boost/random/uniform_int_distribution.hpp>

#include <algorithm>
#include <exception>
#include <random>
#include <stdexcept>

namespace rpclb::plugins {
namespace {

using detail::thread_rng;

std::uint32_t parse_weight(const boost::json::object& options) {
    const auto* value = options.if_contains("weight");
    if (!value) return HashRing::default_weight;
    std::int64_t weight = 0;
    if (value->is_int64()) {
        weight = value->get_int64();
    } else if (value->is_uint64()) {
        weight = value->get_uint64() > HashRing::max_weight ? 0 : value->get_uint64();
    } else {
        weight = 0;
    }
    if (weight < 1 || weight > HashRing::max_weight)
        throw std::invalid_argument("hash_ring: option weight must be an integer in 1..4096, got " +
                                    boost::json::serialize(*value));
    return static_cast<std::uint32_t>(weight);
}

ErrorMessage build_failure(std::string_view balancer, const char* what) {
    return ErrorMessage{ErrorCode::internal_server_error,
                        std::string("hash_ring: building the ring failed: ") + what,
                        boost::json::object{{"load_balancer", balancer}}};
}

// True when `list` (distinct names, any order) holds the names of `sorted` (distinct,
// ascending): as many names, each of them in `sorted`. No allocation.
bool same_set(const std::vector<std::string>& sorted, const std::vector<std::string>& list) {
    if (sorted.size() != list.size()) return false;
    for (const auto& name : list)
        if (!std::binary_search(sorted.begin(), sorted.end(), name)) return false;
    return true;
}

// The index of `name` in `members.nodes`, for a list not in the ring's order. A name
// missing means the list repeats names (outside MemberSnapshot's contract).
Result<std::size_t> position_in(const MemberSnapshot& members, const std::string& name,
                                std::string_view balancer) {
    const auto at = std::find(members.nodes.begin(), members.nodes.end(), name);
    if (at == members.nodes.end())
        return ErrorMessage{ErrorCode::internal_server_error,
                            "hash_ring: the member list repeats a name",
                            boost::json::object{{"load_balancer", balancer}}};
    return static_cast<std::size_t>(at - members.nodes.begin());
}

}  // namespace

HashRing::HashRing()
    : slot_count_(detail::thread_slot_count()), hazards_(new Hazard[slot_count_]) {}

HashRing::~HashRing() {
    for (auto& kept : kept_) delete kept.load(std::memory_order_relaxed);
}

void HashRing::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "hash_ring", {"weight"});
    weight_ = parse_weight(options);
    balancer_ = context.balancer;
    host_ = context.host;
}

// A keyed pick's hold on the kept entries: while it lives, an entry it got from `protect`
// isn't freed. A thread with a slot publishes the entry in its hazard; a thread without
// one counts itself in slotless_readers_ (and holds back every eviction meanwhile).
class HashRing::Reader {
public:
    explicit Reader(HashRing& owner) noexcept : owner_(owner), slot_(detail::thread_slot()) {
        if (!slotted()) owner_.slotless_readers_.fetch_add(1, std::memory_order_seq_cst);
    }
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;
    // Release: the reads of the ring happen before a free that sees the hazard cleared.
    ~Reader() {
        if (slotted())
            owner_.hazards_[slot_].entry.store(nullptr, std::memory_order_release);
        else
            owner_.slotless_readers_.fetch_sub(1, std::memory_order_release);
    }

    // The entry `from` holds, safe to read until the next `protect` or the Reader's end.
    // Sequentially consistent with free_unread: either the hazard is seen there, or the
    // re-read here sees the entry gone from `from` and tries again.
    const Entry* protect(const std::atomic<Entry*>& from) noexcept {
        const Entry* entry = from.load(std::memory_order_seq_cst);
        if (!slotted()) return entry;
        auto& hazard = owner_.hazards_[slot_].entry;
        for (;;) {
            hazard.store(entry, std::memory_order_seq_cst);
            const Entry* again = from.load(std::memory_order_seq_cst);
            if (again == entry) return entry;
            entry = again;
        }
    }

private:
    bool slotted() const noexcept { return slot_ < owner_.slot_count_; }

    HashRing& owner_;
    const std::size_t slot_;
};

Result<std::size_t> HashRing::choose_from_nodes(const MemberSnapshot& members,
                                                const PickOptions& options) {
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(balancer_);
    if (!options.key) {
        boost::random::uniform_int_distribution<std::size_t> pick(0, size - 1);
        return pick(thread_rng());
    }
    Reader reader(*this);
    const Found found = ring_for(reader, members);
    if (!found.entry) return build_failure(balancer_, "out of memory");
    const std::size_t owner = found.entry->ring.owner_of(*options.key);
    if (found.in_order) return owner;
    return position_in(members, found.entry->ring.nodes()[owner], balancer_);
}

Result<std::vector<std::size_t>> HashRing::choose_nodes(const MemberSnapshot& members,
                                                        std::size_t count,
                                                        const PickOptions& options) {
    if (members.nodes.empty()) return empty_members_error(balancer_);
    if (!options.key) return SelectionAlgorithm::choose_nodes(members, count, options);
    Reader reader(*this);
    const Found found = ring_for(reader, members);
    if (!found.entry) return build_failure(balancer_, "out of memory");
    try {
        std::vector<std::size_t> replicas;
        replicas.reserve(std::min(count, members.nodes.size()));
        found.entry->ring.replicas(ConsistentHashRing::hash(*options.key), count, replicas);
        if (!found.in_order) {
            for (auto& index : replicas) {
                auto at = position_in(members, found.entry->ring.nodes()[index], balancer_);
                if (!at) return at.error();
                index = *at;
            }
        }
        return replicas;
    } catch (const std::exception& e) {
        return build_failure(balancer_, e.what());
    }
}

void HashRing::on_node_change(NodeChange change, std::span<const std::string> nodes) {
    try {
        std::shared_ptr<const MemberSnapshot> reported;
        if (host_) reported = host_->members();
        std::lock_guard lock(mutex_);
        notified_ = true;
        if (reported) {
            tracked_ = reported->nodes;
            std::sort(tracked_.begin(), tracked_.end());
        } else {
            for (const auto& node : nodes) {
                const auto at = std::lower_bound(tracked_.begin(), tracked_.end(), node);
                const bool present = at != tracked_.end() && *at == node;
                if (change == NodeChange::joined && !present) tracked_.insert(at, node);
                if (change == NodeChange::left && present) tracked_.erase(at);
            }
        }
        if (tracked_.empty()) return;
        Entry* entry = make_current(tracked_);
        if (reported && reported->nodes == tracked_)
            entry->version_plus_one.store(reported->version + 1, std::memory_order_relaxed);
    } catch (const std::exception&) {
        // Out of memory: the picks build the ring when they need it.
    }
}

HashRing::Found HashRing::ring_for(Reader& reader, const MemberSnapshot& members) noexcept {
    const Found found = find(reader, members);
    if (found.entry) [[likely]] return found;
    return build_for(reader, members);
}

HashRing::Found HashRing::find(Reader& reader, const MemberSnapshot& members) noexcept {
    const std::uint64_t wanted = members.version + 1;
    const std::size_t size = members.nodes.size();
    auto stands_for = [&](const Entry* entry) {
        return entry && entry->version_plus_one.load(std::memory_order_relaxed) == wanted &&
               entry->ring.nodes().size() == size;
    };
    // By version: the current ring, then the other kept ones.
    if (const Entry* entry = reader.protect(current_); stands_for(entry)) return {entry, true};
    for (const auto& kept : kept_)
        if (const Entry* entry = reader.protect(kept); stands_for(entry)) return {entry, true};
    // By names, once per new version of a sorted list.
    const bool in_order = std::is_sorted(members.nodes.begin(), members.nodes.end());
    for (const auto& kept : kept_) {
        const Entry* entry = reader.protect(kept);
        if (!entry || entry->ring.nodes().size() != size) continue;
        if (in_order) {
            if (entry->ring.nodes() == members.nodes) {
                entry->version_plus_one.store(wanted, std::memory_order_relaxed);
                return {entry, true};
            }
        } else if (same_set(entry->ring.nodes(), members.nodes)) {
            return {entry, false};
        }
    }
    return {nullptr, false};
}

HashRing::Found HashRing::build_for(Reader& reader, const MemberSnapshot& members) noexcept {
    try {
        std::lock_guard lock(mutex_);
        // Another pick or a notification may have built it while this one waited.
        if (const Found found = find(reader, members); found.entry) return found;
        std::vector<std::string> sorted(members.nodes);
        std::sort(sorted.begin(), sorted.end());
        // Until the first notification, the picks' snapshots say what the set is.
        if (!notified_) tracked_ = sorted;
        make_current(sorted);
        return find(reader, members);
    } catch (const std::exception&) {
        return {nullptr, false};
    }
}

HashRing::Entry* HashRing::make_current(const std::vector<std::string>& sorted) {
    ++changes_;
    for (std::size_t i = 0; i < kept_rings; ++i) {
        Entry* entry = kept_[i].load(std::memory_order_relaxed);
        if (entry && entry->ring.nodes() == sorted) {
            made_current_at_[i] = changes_;
            current_.store(entry, std::memory_order_seq_cst);
            free_unread();  // what an earlier eviction had to leave
            return entry;
        }
    }
    evicted_.reserve(evicted_.size() + 1);  // so that nothing below the build throws
    auto fresh = std::make_unique<Entry>(sorted, weight_);
    rings_built_.fetch_add(1, std::memory_order_relaxed);
    // An empty place, or else the one least recently made current (never the current one).
    const Entry* current = current_.load(std::memory_order_relaxed);
    std::size_t place = kept_rings;
    for (std::size_t i = 0; i < kept_rings; ++i) {
        const Entry* kept = kept_[i].load(std::memory_order_relaxed);
        if (!kept) {
            place = i;
            break;
        }
        if (kept != current && (place == kept_rings || made_current_at_[i] < made_current_at_[place]))
            place = i;
    }
    if (Entry* old = kept_[place].load(std::memory_order_relaxed)) evicted_.emplace_back(old);
    Entry* entry = fresh.release();
    kept_[place].store(entry, std::memory_order_seq_cst);
    made_current_at_[place] = changes_;
    current_.store(entry, std::memory_order_seq_cst);
    free_unread();
    return entry;
}

void HashRing::free_unread() {
    // Sequentially consistent with Reader::protect: an evicted entry is in no kept place
    // any more, so a pick that doesn't show it in its hazard now can't get it later.
    if (slotless_readers_.load(std::memory_order_seq_cst) != 0) return;
    std::erase_if(evicted_, [this](const std::unique_ptr<Entry>& evicted) {
        for (std::size_t slot = 0; slot < slot_count_; ++slot)
            if (hazards_[slot].entry.load(std::memory_order_seq_cst) == evicted.get()) return false;
        return true;
    });
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(hash_ring, rpclb::plugins::HashRing)
