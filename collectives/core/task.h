// A coroutine that runs one algorithm as a resumable state machine. Algorithms read top to bottom
// (post sends and receives, `co_await` them, reduce) yet return to the progress engine whenever they
// wait, so one engine thread drives many operations, and 144 in-process ranks, without blocking.
//
// A Task starts suspended. Awaiting a Task from another Task runs it and resumes the awaiter when it
// ends (symmetric transfer, no stack growth); its exception propagates to the awaiter.
//
// Frames come from the operation's arena (op_arena.h) when the coroutine's first parameter, or the
// object whose member it is, has one (an Op, or a helper running inside one), else from the heap.
#pragma once

#include <concepts>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <utility>

#include "collectives/core/op_arena.h"

namespace fsdp {

class [[nodiscard]] Task {
 public:
  struct promise_type {
    std::coroutine_handle<> continuation;
    std::exception_ptr error;

    template <class First, class... Rest>
      requires requires(First& first) { { first.arena() } -> std::same_as<OpArena&>; }
    static void* operator new(size_t bytes, First& first, Rest&...) {
      return OpArena::allocate_frame(&first.arena(), bytes);
    }
    static void* operator new(size_t bytes) { return OpArena::allocate_frame(nullptr, bytes); }
    static void operator delete(void* frame, size_t bytes) noexcept { OpArena::free_frame(frame, bytes); }

    Task get_return_object() { return Task(std::coroutine_handle<promise_type>::from_promise(*this)); }
    std::suspend_always initial_suspend() noexcept { return {}; }
    auto final_suspend() noexcept {
      struct Resumer {
        bool await_ready() noexcept { return false; }
        std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> self) noexcept {
          auto next = self.promise().continuation;
          return next ? next : std::noop_coroutine();
        }
        void await_resume() noexcept {}
      };
      return Resumer{};
    }
    void return_void() {}
    void unhandled_exception() { error = std::current_exception(); }
  };

  Task() = default;
  explicit Task(std::coroutine_handle<promise_type> h) : handle_(h) {}
  Task(Task&& other) noexcept : handle_(std::exchange(other.handle_, {})) {}
  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, {});
    }
    return *this;
  }
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() { reset(); }

  bool valid() const { return static_cast<bool>(handle_); }
  bool done() const { return handle_.done(); }
  std::coroutine_handle<> handle() const { return handle_; }
  // What the coroutine threw, once it is done; null if it returned normally.
  std::exception_ptr error() const { return handle_.promise().error; }
  // Rethrows what the coroutine threw, once it is done.
  void rethrow_if_failed() const {
    if (handle_.promise().error) std::rethrow_exception(handle_.promise().error);
  }

  // Awaiting a task runs it to completion inside the awaiting coroutine.
  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiter) noexcept {
    handle_.promise().continuation = awaiter;
    return handle_;
  }
  void await_resume() const { rethrow_if_failed(); }

 private:
  void reset() {
    if (handle_) handle_.destroy();
    handle_ = {};
  }
  std::coroutine_handle<promise_type> handle_;
};

}  // namespace fsdp
