#include "maglev.hpp"

#include <boost/json/serialize.hpp>

// Header-only xxHash: nothing has to link libxxhash.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace rpclb::plugins {
namespace {

bool is_prime(std::uint64_t n) {
    if (n < 2) return false;
    for (std::uint64_t d = 2; d * d <= n; ++d)
        if (n % d == 0) return false;
    return true;
}

std::uint32_t parse_table_size(const boost::json::object& options) {
    const auto* value = options.if_contains("table_size");
    if (!value) return Maglev::default_table_size;
    const bool integer = value->is_int64() || value->is_uint64();
    const std::int64_t n = integer && value->is_int64() ? value->get_int64()
                           : integer && value->get_uint64() <= 2'000'000 ? static_cast<std::int64_t>(value->get_uint64())
                                                                         : -1;
    if (n < 211 || n > 1'000'003 || !is_prime(static_cast<std::uint64_t>(n)))
        throw std::invalid_argument("maglev: option table_size must be a prime from 211 to 1000003, got " +
                                    boost::json::serialize(*value));
    return static_cast<std::uint32_t>(n);
}

ErrorMessage build_failure(std::string_view balancer, const std::string& what) {
    return ErrorMessage{ErrorCode::internal_server_error, "maglev: building the table failed: " + what,
                        boost::json::object{{"load_balancer", balancer}}};
}

}  // namespace

std::uint64_t MaglevTable::hash(std::string_view bytes) noexcept { return XXH3_64bits(bytes.data(), bytes.size()); }

MaglevTable::MaglevTable(std::span<const std::string> nodes, std::uint32_t size) {
    constexpr std::uint32_t empty = ~std::uint32_t{0};
    entries_.assign(size, empty);
    if (nodes.empty()) return;
    // Name order, so the table doesn't depend on the order the members were listed in.
    std::vector<std::uint32_t> order(nodes.size());
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return nodes[a] < nodes[b]; });
    std::vector<std::uint64_t> offset(nodes.size()), skip(nodes.size()), next(nodes.size(), 0);
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        offset[i] = XXH3_64bits_withSeed(nodes[i].data(), nodes[i].size(), 0x6d61676c) % size;
        skip[i] = XXH3_64bits_withSeed(nodes[i].data(), nodes[i].size(), 0x65763031) % (size - 1) + 1;
    }
    std::size_t filled = 0;
    while (true) {
        for (const std::uint32_t member : order) {
            std::uint64_t entry = 0;
            do {
                entry = (offset[member] + next[member] * skip[member]) % size;
                ++next[member];
            } while (entries_[entry] != empty);
            entries_[entry] = member;
            if (++filled == size) return;
        }
    }
}

void MaglevTable::replicas(std::uint64_t h, std::size_t count, std::size_t members,
                           std::vector<std::size_t>& out) const {
    const std::size_t take = std::min(count, members);
    std::vector<bool> taken(members);
    for (std::size_t step = 0, at = h % entries_.size(); step < entries_.size() && out.size() < take; ++step) {
        const std::size_t member = entries_[at];
        if (!taken[member]) {
            taken[member] = true;
            out.push_back(member);
        }
        if (++at == entries_.size()) at = 0;
    }
}

void Maglev::init(const AlgorithmContext& context, const boost::json::object& options) {
    reject_unknown_options(options, "maglev", {"table_size"});
    table_size_ = parse_table_size(options);
    balancer_ = context.balancer;
}

Result<const MaglevTable*> Maglev::table_of(const MemberSnapshot& members) {
    try {
        return &members.state<MaglevTable>(snapshot_owner(), [&] {
            tables_built_.fetch_add(1, std::memory_order_relaxed);
            // At least 10 entries a member: the smallest prime above that when table_size
            // is smaller (the same on every node, since it depends on the set alone).
            std::uint64_t size = table_size_;
            if (size < members.nodes.size() * 10)
                for (size = members.nodes.size() * 10 + 1; !is_prime(size); ++size) {
                }
            return MaglevTable(members.nodes, static_cast<std::uint32_t>(size));
        });
    } catch (const std::exception& e) {
        return build_failure(balancer_, e.what());
    }
}

Result<std::size_t> Maglev::choose_from_nodes(const MemberSnapshot& members, const PickOptions& options) {
    const std::size_t size = members.nodes.size();
    if (size == 0) return empty_members_error(balancer_);
    if (!options.key) return scale32(thread_random(), size);
    auto table = table_of(members);
    if (!table) return table.error();
    return (*table)->owner(MaglevTable::hash(*options.key));
}

Result<std::vector<std::size_t>> Maglev::choose_nodes(const MemberSnapshot& members, std::size_t count,
                                                      const PickOptions& options) {
    if (members.nodes.empty()) return empty_members_error(balancer_);
    if (!options.key) return SelectionAlgorithm::choose_nodes(members, count, options);
    auto table = table_of(members);
    if (!table) return table.error();
    std::vector<std::size_t> replicas;
    replicas.reserve(std::min(count, members.nodes.size()));
    (*table)->replicas(MaglevTable::hash(*options.key), count, members.nodes.size(), replicas);
    return replicas;
}

}  // namespace rpclb::plugins

RPCLB_PLUGIN(maglev, rpclb::plugins::Maglev)
