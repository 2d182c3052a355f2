// core/stream_order.h on a stand-in accelerator: a device guard for the
// PrivateUse1 device type whose streams are numbers (one current stream per
// thread) and whose events only log what they are asked to do. So the
// ordering logic runs without a GPU; tests/cuda_test.cpp checks the effect
// on a real one (ReplayBufferOrdersCallsFromDifferentStreams).
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/stream_order.h"

namespace {

using tensordict::detail::StreamOrder;

constexpr c10::DeviceType kFake = c10::DeviceType::PrivateUse1;
const c10::Device kDev0(kFake, 0);
const c10::Device kDev1(kFake, 1);

std::vector<std::string>& Log() {
  static std::vector<std::string> log;
  return log;
}
thread_local c10::StreamId current_stream[2] = {0, 0};
int events_made = 0;

std::string Name(const c10::Stream& s) {
  return "dev" + std::to_string(s.device_index()) + ":stream" +
         std::to_string(s.id());
}

class FakeStreams final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kFake; }
  c10::Device exchangeDevice(c10::Device d) const override { return d; }
  c10::Device getDevice() const override { return kDev0; }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::UNSAFE, d, current_stream[d.index()]);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    const c10::Stream old = getStream(s.device());
    current_stream[s.device_index()] = s.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 2; }
  void record(void** event, const c10::Stream& stream, c10::DeviceIndex,
              c10::EventFlag) const override {
    if (*event == nullptr) *event = new int(++events_made);
    Log().push_back("event" + std::to_string(*static_cast<int*>(*event)) +
                    " recorded on " + Name(stream));
  }
  void block(void* event, const c10::Stream& stream) const override {
    Log().push_back(Name(stream) + " waits for event" +
                    std::to_string(*static_cast<int*>(event)));
  }
  void destroyEvent(void* event, c10::DeviceIndex) const noexcept override {
    delete static_cast<int*>(event);
  }
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, FakeStreams);

c10::Stream FakeStream(c10::Device d, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, d, id);
}

class StreamOrderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Log().clear();
    events_made = 0;
    current_stream[0] = current_stream[1] = 0;
  }
};

TEST_F(StreamOrderTest, AccessesFromOneStreamMakeNoEvents) {
  StreamOrder order;
  order.set_devices({c10::Device(c10::kCPU), kDev0});
  for (int i = 0; i < 3; ++i) order.enter();
  {
    c10::StreamGuard g(FakeStream(kDev0, 5));
    order.enter();  // the first switch waits for stream 0
    order.enter();
    order.enter();
  }
  EXPECT_EQ(Log(), (std::vector<std::string>{"event1 recorded on dev0:stream0",
                                             "dev0:stream5 waits for event1"}));
}

TEST_F(StreamOrderTest, EachSwitchWaitsForThePreviousStream) {
  StreamOrder order;
  order.set_devices({kDev0});
  order.enter();  // stream 0
  {
    c10::StreamGuard g(FakeStream(kDev0, 3));
    order.enter();
  }
  order.enter();  // back on stream 0
  {
    c10::StreamGuard g(FakeStream(kDev0, 7));
    order.enter();
  }
  EXPECT_EQ(
      Log(),
      (std::vector<std::string>{
          "event1 recorded on dev0:stream0", "dev0:stream3 waits for event1",
          "event2 recorded on dev0:stream3", "dev0:stream0 waits for event2",
          "event3 recorded on dev0:stream0", "dev0:stream7 waits for event3"}));
}

// Each device of the memory is ordered on its own; CPU devices and repeated
// devices are left out; set_devices forgets the previous accesses.
TEST_F(StreamOrderTest, EveryDeviceIsOrderedOnItsOwn) {
  StreamOrder order;
  order.set_devices({kDev0, c10::Device(c10::kCPU), kDev1, kDev0});
  order.enter();
  {
    c10::StreamGuard g(FakeStream(kDev1, 2));  // only device 1 switches
    order.enter();
  }
  EXPECT_EQ(Log(), (std::vector<std::string>{"event1 recorded on dev1:stream0",
                                             "dev1:stream2 waits for event1"}));
  Log().clear();
  c10::StreamGuard g(FakeStream(kDev0, 4));
  order.set_devices({kDev0});  // stream 4 is now the last access's
  order.enter();
  EXPECT_TRUE(Log().empty());
}

}  // namespace
