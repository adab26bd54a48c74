#include "transport/block_cache.hpp"

#include <bit>
#include <new>

namespace rpclb::detail {

BlockCache& BlockCache::instance() {
    // Never destroyed: values decoded into it may be destroyed during static destruction.
    static BlockCache* cache = new BlockCache;
    return *cache;
}

// Class 0 is min_block; then four classes per power of two p (14..19): 5, 6, 7 and 8
// quarters of 2^p, the last of which is 2^(p+1).
std::size_t BlockCache::class_index(std::size_t n) noexcept {
    if (n <= min_block) return 0;
    const std::size_t p = std::bit_width(n - 1) - 1;  // 2^p < n <= 2^(p+1)
    const std::size_t step = std::size_t(1) << (p - 2);
    const std::size_t quarters = (n + step - 1) / step;  // 5..8
    return (p - 14) * 4 + (quarters - 4);
}

std::size_t BlockCache::class_size(std::size_t n) noexcept { return size_of_class(class_index(n)); }

std::size_t BlockCache::size_of_class(std::size_t i) noexcept {
    if (i == 0) return min_block;
    const std::size_t p = 14 + (i - 1) / 4;
    return (5 + (i - 1) % 4) * (std::size_t(1) << (p - 2));
}

bool BlockCache::cached(std::size_t n, std::size_t align) noexcept {
    return n >= min_block && n <= max_block && align <= __STDCPP_DEFAULT_NEW_ALIGNMENT__;
}

void* BlockCache::do_allocate(std::size_t n, std::size_t align) {
    if (!cached(n, align)) {
        if (align > __STDCPP_DEFAULT_NEW_ALIGNMENT__) return ::operator new(n, std::align_val_t(align));
        return ::operator new(n);
    }
    const std::size_t i = class_index(n);
    if (kept_bytes_.load(std::memory_order_relaxed) != 0) {
        std::lock_guard lock(mutex_);
        if (!free_[i].empty()) {
            void* p = free_[i].back();
            free_[i].pop_back();
            kept_bytes_.fetch_sub(size_of_class(i), std::memory_order_relaxed);
            reuses_.fetch_add(1, std::memory_order_relaxed);
            used_.store(true, std::memory_order_relaxed);
            return p;
        }
    }
    return ::operator new(size_of_class(i));
}

void BlockCache::do_deallocate(void* p, std::size_t n, std::size_t align) noexcept {
    if (!cached(n, align)) {
        if (align > __STDCPP_DEFAULT_NEW_ALIGNMENT__) return ::operator delete(p, std::align_val_t(align));
        return ::operator delete(p);
    }
    const std::size_t i = class_index(n);
    const std::size_t size = size_of_class(i);
    if (kept_bytes_.load(std::memory_order_relaxed) + size <= max_bytes) {
        std::lock_guard lock(mutex_);
        if (kept_bytes_.load(std::memory_order_relaxed) + size <= max_bytes) {
            try {
                free_[i].push_back(p);
            } catch (const std::bad_alloc&) {
                return ::operator delete(p);
            }
            kept_bytes_.fetch_add(size, std::memory_order_relaxed);
            used_.store(true, std::memory_order_relaxed);
            return;
        }
    }
    ::operator delete(p);
}

void BlockCache::trim(bool all) {
    if (kept_bytes_.load(std::memory_order_relaxed) == 0) return;
    if (used_.exchange(false, std::memory_order_relaxed) && !all) return;
    std::array<std::vector<void*>, class_count> gone;
    {
        std::lock_guard lock(mutex_);
        gone.swap(free_);
        kept_bytes_.store(0, std::memory_order_relaxed);
    }
    for (auto& blocks : gone)
        for (void* p : blocks) ::operator delete(p);
}

}  // namespace rpclb::detail
