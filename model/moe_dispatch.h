// Dispatch and combine of a MoE feed-forward: the permutation between token order and expert order.
//
// A "choice" is one (token t, slot j) of the router's (n, k) output. Dispatch lays the kept choices out
// as `rows` grouped rows, expert-major (all of expert 0, then expert 1, ...) and by token within an
// expert, so each expert's input is one contiguous (count_e, dim) block and its SwiGLU is one GEMM per
// weight (model/moe_experts.h):
//
//   x (n, dim) --gather--> xg (rows, dim), counts (E) --experts--> yg (rows, dim)
//   yg --combine--> y_t += sum_j weight_tj * yg[row_of_choice(t, j)]
//
// Expert parallelism goes between the two arrows without changing either side: with experts split
// evenly over an EP group of size P, peer p owns experts [p*E/P, (p+1)*E/P), which is one contiguous
// run of xg's rows, so an all_to_all_v with send counts sum(counts over p's experts) sends xg as is; the
// receiver gets P blocks each grouped by its local experts, regroups them expert-major (another call of
// this permutation over (source, local expert) keys), runs its experts, and the reverse path undoes
// both before combine. Nothing here knows of ranks.
#pragma once

#include <cstdint>

namespace fsdp::model {

// expert: (n, k) expert indices from the router. capacity < 0: dropless; else each expert keeps its
// first `capacity` choices in token order and the rest are dropped.
// Writes counts (E): rows per expert; row_of_choice (n, k): grouped row of each choice, or -1 if dropped;
// token_of_row (n*k, first `rows` used): the token of each grouped row. Returns rows (= n*k dropless).
int64_t group_by_expert(const int32_t* expert, int64_t n, int64_t k, int64_t num_experts, int64_t capacity,
                        int64_t* counts, int32_t* row_of_choice, int32_t* token_of_row);

// Dropless capacity -1, else ceil(capacity_factor * n * k / E).
int64_t expert_capacity(float capacity_factor, int64_t n, int64_t k, int64_t num_experts);

// xg (rows, dim) <- x[token_of_row[r]] (dispatch).
void gather_rows(const float* x, const int32_t* token_of_row, int64_t rows, int64_t dim, float* xg);
// dx[token_of_row[r]] += dxg[r] (the backward of gather_rows).
void scatter_add_rows(const float* dxg, const int32_t* token_of_row, int64_t rows, int64_t dim, float* dx);

// y (n, dim) += sum_j weight (n, k)[t, j] * yg[row_of_choice[t, j]] over the kept choices (combine).
void combine_rows(const float* yg, const float* weight, const int32_t* row_of_choice, int64_t n, int64_t k,
                  int64_t dim, float* y);
// The backward of combine_rows for dy (n, dim): writes dyg (rows, dim) = weight * dy[token] per kept
// row, and dweight (n, k) = <dy_t, yg[row]> (0 for a dropped choice). dyg may alias yg: each grouped
// row belongs to one choice and is read before it is written.
void combine_rows_backward(const float* dy, const float* yg, const float* weight, const int32_t* row_of_choice,
                           int64_t n, int64_t k, int64_t dim, float* dyg, float* dweight);

// --- Expert parallelism over P ranks of L = E / P experts each (see the header comment) ---
// send_rows (P): rows for each owner, the sums of counts (E) over its L experts.
void rows_per_owner(const int64_t* counts, int64_t num_experts, int64_t group, int64_t* send_rows);
// recv_counts (P, L): rows source s sent for local expert l. An all_to_all_v delivers them source-major
// (s, then l); the local experts read them expert-major (l, then s). Both move (rows, dim) blocks:
// source_to_expert_major is the forward regrouping, expert_to_source_major its inverse.
void source_to_expert_major(const float* src, const int64_t* recv_counts, int64_t group, int64_t local, int64_t dim,
                            float* dst);
void expert_to_source_major(const float* src, const int64_t* recv_counts, int64_t group, int64_t local, int64_t dim,
                            float* dst);

}  // namespace fsdp::model
