// The tests' allocation counter: how many CPU tensors a piece of code
// allocates, on any thread (tests of what promises to allocate nothing).
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tensordict_test {

namespace detail_alloc {

// LibTorch's CPU allocator with a count of its allocations, installed once
// (priority 100, over LibTorch's default) and kept for the process.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(size_t n) override {
    count_one();
    return base_->allocate(n);
  }
  void copy_data(void* dest, const void* src, std::size_t n) const override {
    default_copy_data(dest, src, n);
  }
#else
  c10::DataPtr allocate(size_t n) const override {
    count_one();
    return base_->allocate(n);
  }
#endif
  c10::DeleterFnPtr raw_deleter() const override {
    return base_->raw_deleter();
  }
  std::atomic<int> active{0};
  std::atomic<int64_t> count{0};

 private:
  void count_one() const {
    auto* self = const_cast<CountingAllocator*>(this);
    if (self->active.load() > 0) ++self->count;
  }
  c10::Allocator* base_;
};

inline CountingAllocator& counting_allocator() {
  static CountingAllocator* allocator = [] {
    auto* a = new CountingAllocator(c10::GetCPUAllocator());
    c10::SetCPUAllocator(a, /*priority=*/100);
    return a;
  }();
  return *allocator;
}

}  // namespace detail_alloc

// Counts the CPU tensor allocations made on any thread while it is alive.
class AllocationCounter {
 public:
  AllocationCounter()
      : start_(detail_alloc::counting_allocator().count.load()) {
    ++detail_alloc::counting_allocator().active;
  }
  ~AllocationCounter() { --detail_alloc::counting_allocator().active; }
  AllocationCounter(const AllocationCounter&) = delete;
  AllocationCounter& operator=(const AllocationCounter&) = delete;
  [[nodiscard]] int64_t count() const {
    return detail_alloc::counting_allocator().count.load() - start_;
  }

 private:
  int64_t start_;
};

}  // namespace tensordict_test
