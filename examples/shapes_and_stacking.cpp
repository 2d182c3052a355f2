// examples/shapes_and_stacking.cpp — the code of
// docs/tutorials/shapes_and_stacking.md.
//
// Every C++ block of the tutorial is an excerpt of this file, and every output
// block is what it prints. The TORCH_CHECKs verify what the text says.
#include <tensordict/tensordict.h>

#include <iostream>
#include <string>
#include <vector>

using tensordict::TensorDict;
using namespace torch::indexing;

namespace {

// One environment step: a dict with no batch dims.
TensorDict make_step(int64_t t) {
  const double v = static_cast<double>(t);
  return TensorDict({{"obs", torch::full({3}, v)},
                     {"action", torch::full({2}, v)},
                     {"reward", torch::full({1}, v)},
                     {{"next", "obs"}, torch::full({3}, v + 1)}},
                    {});
}

// The message of the c10::Error that `fn` throws ("" if it throws nothing).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return e.msg();
  }
  return "";
}

void stacking() {
  std::vector<TensorDict> rows;
  for (int64_t t = 0; t < 4; ++t) rows.push_back(make_step(t));
  TensorDict rollout = tensordict::stack(rows);  // batch_size [4], new tensors
  std::cout << rollout << "\n";

  TORCH_CHECK(rollout.batch_size() == std::vector<int64_t>{4});
  TORCH_CHECK(rollout.get({"next", "obs"}).sizes() ==
              std::vector<int64_t>({4, 3}));
  TORCH_CHECK(rollout[2].get("obs").equal(rows[2].get("obs")));
  rollout.get("obs").fill_(-1);  // a copy: the rows are unchanged
  TORCH_CHECK(rows[2].get("obs").eq(2).all().item<bool>());
}

void stacking_other_dims() {
  // Two environments per step: each step is a dict with batch_size [2].
  std::vector<TensorDict> steps;
  for (int64_t t = 0; t < 5; ++t) {
    steps.push_back(tensordict::stack({make_step(t), make_step(10 + t)}));
  }
  TensorDict time_major = tensordict::stack(steps);    // [5, 2]: [t, env]
  TensorDict env_major = tensordict::stack(steps, 1);  // [2, 5]: [env, t]
  TensorDict longer = tensordict::cat({time_major, time_major});  // [10, 2]

  TORCH_CHECK(time_major.batch_size() == std::vector<int64_t>({5, 2}));
  TORCH_CHECK(env_major.batch_size() == std::vector<int64_t>({2, 5}));
  TORCH_CHECK(env_major.get("obs").sizes() == std::vector<int64_t>({2, 5, 3}));
  TORCH_CHECK(env_major[1][4].get("obs").eq(14).all().item<bool>());
  TORCH_CHECK(longer.batch_size() == std::vector<int64_t>({10, 2}));
  std::cout << "time_major " << time_major.batch_size() << ", env_major "
            << env_major.batch_size() << ", longer " << longer.batch_size()
            << "\n";
}

void stacking_into_a_buffer() {
  TensorDict buffer({}, {8});
  buffer[0] = make_step(0);  // allocates every key, [8, ...] zeros
  torch::Tensor obs = buffer.get("obs");

  std::vector<TensorDict> chunk = {make_step(1), make_step(2), make_step(3)};
  tensordict::stack_out(buffer.index({Slice(1, 4)}), chunk);  // rows 1..3

  TensorDict more = tensordict::stack({make_step(4), make_step(5)});
  tensordict::cat_out(buffer.index({Slice(4, 8)}), {more, more});  // rows 4..7

  TORCH_CHECK(buffer.get("obs").is_same(obs));  // the same tensor, written
  TORCH_CHECK(buffer.get("obs").select(1, 0).equal(
      torch::tensor({0., 1., 2., 3., 4., 5., 4., 5.})));
  std::cout << "obs[:, 0] =";
  for (int64_t t = 0; t < 8; ++t) std::cout << " " << obs[t][0].item<float>();
  std::cout << "\n";
}

void lazy_allocation() {
  TensorDict out({}, {3});  // no keys yet
  tensordict::stack_out(out, {make_step(0), make_step(1), make_step(2)});
  TORCH_CHECK(out.get({"next", "obs"}).sizes() == std::vector<int64_t>({3, 3}));
  torch::Tensor obs = out.get("obs");
  tensordict::stack_out(out, {make_step(3), make_step(4), make_step(5)});
  TORCH_CHECK(out.get("obs").is_same(obs));  // allocated once, then in place

  // A slice is a new dict of views: keys it allocates stay in the slice.
  TensorDict buffer({}, {8});
  TensorDict slice = buffer.index({Slice(0, 3)});
  tensordict::stack_out(slice, {make_step(0), make_step(1), make_step(2)});
  TORCH_CHECK(slice.contains("obs") && !buffer.contains("obs"));

  // The indexed buffer allocates in the buffer: [8, ...] tensors.
  tensordict::stack_out(buffer[Slice(0, 3)],
                        {make_step(0), make_step(1), make_step(2)});
  TORCH_CHECK(buffer.get("obs").size(0) == 8);
  torch::Tensor buffer_obs = buffer.get("obs");
  tensordict::stack_out(buffer[Slice(3, 5)], {make_step(3), make_step(4)});
  TORCH_CHECK(buffer.get("obs").is_same(buffer_obs));  // then in place
}

void stack_errors() {
  TensorDict a = make_step(0);
  TensorDict b = make_step(1);
  b.erase("reward");
  b.set("done", torch::zeros({1}, torch::kBool));
  try {
    (void)tensordict::stack({a, b});
  } catch (const c10::Error& e) {
    std::cout << e.msg() << "\n";
  }
}

void checked_stack_errors() {
  TensorDict a = make_step(0);
  TensorDict b = make_step(1);
  b.erase("reward");
  b.set("done", torch::zeros({1}, torch::kBool));
  TORCH_CHECK(error_of([&] {
                (void)tensordict::stack({a, b});
              }) ==
              "stack: TensorDicts have different keys: missing from input 0: "
              "[done]; missing from input 1: [reward]");

  TensorDict wide({{"obs", torch::zeros({4})},
                   {"action", torch::zeros({2})},
                   {"reward", torch::zeros({1})},
                   {{"next", "obs"}, torch::zeros({3})}},
                  {});
  std::string msg = error_of([&] { (void)tensordict::stack({a, wide}); });
  std::cout << msg << "\n";
  TORCH_CHECK(msg.find("key obs") != std::string::npos, msg);
}

void splitting() {
  TensorDict rollout = tensordict::stack(
      {make_step(0), make_step(1), make_step(2), make_step(3), make_step(4)});

  std::vector<TensorDict> rows = rollout.unbind(0);       // 5 dicts, batch []
  std::vector<TensorDict> parts = rollout.split(2);       // [2], [2], [1]
  std::vector<TensorDict> sized = rollout.split({1, 4});  // [1], [4]
  std::vector<TensorDict> halves = rollout.chunk(2);      // [3], [2]

  TORCH_CHECK(rows.size() == 5 && rows[3].batch_size().empty());
  TORCH_CHECK(parts.size() == 3 && parts[2].batch_size()[0] == 1);
  TORCH_CHECK(sized[1].batch_size()[0] == 4);
  TORCH_CHECK(halves[0].batch_size()[0] == 3 && halves[1].batch_size()[0] == 2);

  // The pieces are views: they share rollout's memory.
  TORCH_CHECK(parts[0].get("obs").data_ptr() == rollout.get("obs").data_ptr());
  halves[1].get({"next", "obs"}).fill_(0);  // rows 3 and 4 of rollout
  TORCH_CHECK(rollout.get({"next", "obs"})[4].eq(0).all().item<bool>());
  std::cout << "split(2):";
  for (const auto& p : parts) std::cout << " " << p.batch_size();
  std::cout << "\n";
}

// Prints the batch size and the shape of one leaf, and whether that leaf
// shares `base`'s data pointer.
void show(const std::string& name, const TensorDict& td,
          const TensorDict& base) {
  const torch::Tensor obs = td.get("obs");
  std::cout << name << ": batch_size " << td.batch_size() << ", obs "
            << obs.sizes() << ", reward " << td.get("reward").sizes()
            << (obs.data_ptr() == base.get("obs").data_ptr() ? ", view"
                                                             : ", copy")
            << "\n";
}

void shape_ops() {
  TensorDict td({{"obs", torch::rand({2, 3, 4})},
                 {"reward", torch::rand({2, 3})},
                 {{"next", "obs"}, torch::rand({2, 3, 4})}},
                {2, 3});

  TensorDict flat = td.reshape({-1});                  // [6]
  TensorDict grid = flat.view({3, -1});                // [3, 2]
  TensorDict lifted = td.unsqueeze(0);                 // [1, 2, 3]
  TensorDict dropped = lifted.squeeze();               // [2, 3]
  TensorDict swapped = td.permute({1, 0});             // [3, 2]
  TensorDict transposed = td.transpose(0, 1);          // [3, 2]
  TensorDict flattened = td.flatten(0, 1);             // [6]
  TensorDict unflat = flattened.unflatten(0, {2, 3});  // [2, 3]
  TensorDict expanded = td.expand({5, 2, 3});          // [5, 2, 3]

  show("reshape({-1})", flat, td);
  show("view({3, -1})", grid, td);
  show("unsqueeze(0)", lifted, td);
  show("squeeze()", dropped, td);
  show("permute({1, 0})", swapped, td);
  show("transpose(0, 1)", transposed, td);
  show("flatten(0, 1)", flattened, td);
  show("unflatten(0, {2, 3})", unflat, td);
  show("expand({5, 2, 3})", expanded, td);

  TORCH_CHECK(swapped.get("obs").sizes() == std::vector<int64_t>({3, 2, 4}));
  TORCH_CHECK(swapped.get("obs").equal(td.get("obs").transpose(0, 1)));
  TORCH_CHECK(expanded.get({"next", "obs"}).stride(0) == 0);
  for (const TensorDict& r : {flat, grid, lifted, dropped, swapped, transposed,
                              flattened, unflat, expanded}) {
    TORCH_CHECK(r.get("obs").data_ptr() == td.get("obs").data_ptr());
    TORCH_CHECK(r.get({"next", "obs"}).data_ptr() ==
                td.get({"next", "obs"}).data_ptr());
  }
  TORCH_CHECK(td.squeeze(0).batch_size() == std::vector<int64_t>({2, 3}));
}

void views_and_copies() {
  TensorDict td(
      {{"obs", torch::rand({2, 3, 4})}, {"reward", torch::rand({2, 3})}},
      {2, 3});
  TensorDict swapped = td.transpose(0, 1);  // a view, no longer contiguous
  TensorDict flat = swapped.reshape({-1});  // must copy
  show("transpose(0, 1).reshape({-1})", flat, td);
  TORCH_CHECK(flat.get("obs").data_ptr() != td.get("obs").data_ptr());
  try {
    (void)swapped.view({-1});
  } catch (const c10::Error& e) {
    std::cout << e.msg() << "\n";
  }
}

}  // namespace

int main() {
  stacking();
  stacking_other_dims();
  stacking_into_a_buffer();
  lazy_allocation();
  stack_errors();
  checked_stack_errors();
  splitting();
  shape_ops();
  views_and_copies();
  std::cout << "shapes_and_stacking: all checks passed\n";
}
