/*
 * test_kernels_race.cu - every kernel of the CUDA backend once, on small
 * random inputs, for the ThreadSanitizer build (scripts/test-cuda-emu):
 * fibers are TSan fibers synchronised only by barriers and warp operations,
 * so a kernel that reads shared memory another thread wrote without a
 * barrier between is reported. Values are checked elsewhere
 * (test/engine/test_backend.c); this program only runs the kernels.
 */
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"

/* n floats in [-1, 1) on the device. */
static float *
device_randoms(size_t n, unsigned *state)
{
	float	   *h = (float *) malloc(n * sizeof(float)),
			   *d = NULL;

	for (size_t i = 0; i < n; i++)
	{
		*state = *state * 1664525u + 1013904223u;
		h[i] = (float) ((*state >> 8) & 0xFFFFFF) / 8388608.0f - 1.0f;
	}
	cudaMalloc((void **) &d, n * sizeof(float));
	cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
	free(h);
	return d;
}

template <class T>
static T *
device_copy(const T *h, size_t n)
{
	T		   *d = NULL;

	cudaMalloc((void **) &d, n * sizeof(T));
	cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice);
	return d;
}

int
main(void)
{
	enum {R = 6, D = 64, V = 70, H = 2, DK = 32};
	unsigned	state = 7;
	cudaStream_t s = 0;
	float	   *x = device_randoms(R * 3 * D, &state),
			   *y = device_randoms(R * 3 * D, &state),
			   *out = device_randoms(R * 3 * D, &state),
			   *g = device_randoms(D, &state),
			   *b = device_randoms(D, &state),
			   *mean = device_randoms(R, &state),
			   *rstd = device_randoms(R, &state),
			   *logits = device_randoms(R * V, &state),
			   *inv = device_randoms(R, &state),
			   *work = device_randoms(4096, &state),
			   *probs = device_randoms(4096, &state),
			   *lse = device_randoms(R * H, &state),
			   *top = device_randoms(R * 4, &state);
	int32_t		ids_h[R] = {1, 5, 1, 0, 3, 2},
				labels_h[R] = {4, 0, 17, 69, 3, 9},
				qs_h[3] = {0, 4, 6};
	int64_t		ps_h[3] = {0, H * 16, H * 16 + H * 4};
	int32_t		groups_h[3 * R + 1] = {0, 1, 3, 4, 5, 6, 0, 1, 2, 3, 5, 3, 0, 2, 5, 4, 1};	/* ids_h by id: 5 distinct */
	int32_t    *ids = device_copy(ids_h, R),
			   *groups = device_copy(groups_h, 3 * R + 1),
			   *labels = device_copy(labels_h, R),
			   *qs = device_copy(qs_h, 3),
			   *top_id = NULL;
	int64_t    *ps = device_copy(ps_h, 3);
	double	   *rows = NULL,
			   *acc = NULL,
			   *partials = NULL;
	uint8_t    *mask = NULL;
	__nv_bfloat16 *cache = NULL,
			   *c16 = NULL,			/* bf16 copies of outputs (set_operands16) */
			   *l16 = NULL;
	TfAttentionShape sh = {};

	cudaMalloc((void **) &rows, R * sizeof(double));
	cudaMalloc((void **) &acc, sizeof(double));
	cudaMalloc((void **) &partials, k_sum_squares_partials() * sizeof(double));
	cudaMalloc((void **) &mask, R * D);
	cudaMemset(acc, 0, sizeof(double));
	cudaMalloc((void **) &top_id, R * 4 * sizeof(int32_t));
	cudaMalloc((void **) &cache, R * 2 * D * sizeof(__nv_bfloat16));
	cudaMalloc((void **) &c16, 107 * 3 * D * sizeof(__nv_bfloat16));
	cudaMalloc((void **) &l16, R * V * sizeof(__nv_bfloat16));

	k_add(out, x, y, R * D, s);
	k_bias_rows(out, g, R, D, D, s);
	k_bias_backward(g, y, R, D, D, 0.5f, work, 4096, s);
	for (int f = TF_RELU; f <= TF_GELU; f++)
	{
		k_activation((TfActivation) f, out, c16, x, R * D, s);
		k_activation_backward((TfActivation) f, out, c16, y, x, R * D, s);
	}
	k_dropout(out, c16, x, R * D, 0.3f, 1, 2, mask, s);
	k_dropout_backward(out, c16, y, R * D, 0.3f, mask, s);
	k_embed(out, c16, ids, ids, x, y, R, D, 2.0f, 0.3f, 1, 2, mask, s);
	k_embed_backward(x, y, 4, out, groups, 5, D, 2.0f, s);
	k_layernorm(out, c16, mean, rstd, x, g, b, R, D, 1e-5f, s);
	k_layernorm_backward(out, y, x, mean, rstd, g, R, D, work, s);
	{
		float	   *r = device_randoms(R * D, &state),
				   *dy = device_randoms(R * D, &state);

		k_residual_layernorm(out, c16, mean, rstd, r, x, y, g, b, R, D, 1e-5f, 0.3f, 1, 2, mask, s);
		k_residual_layernorm_backward(r, dy, c16, y, out, mean, rstd, g, R, D, 0.3f, mask, work + 2 * D, s);
	}
	{
		/* 150 rows: 10 chunks, the last of 6 rows */
		float	   *x2 = device_randoms(150 * D, &state),
				   *y2 = device_randoms(150 * D, &state),
				   *o2 = device_randoms(150 * D, &state),
				   *m2 = device_randoms(150, &state),
				   *s2 = device_randoms(150, &state),
				   *dg1 = device_randoms(D, &state),
				   *db1 = device_randoms(D, &state);
		LayerNormTotals t = {};

		k_layernorm_backward(o2, y2, x2, m2, s2, g, 150, D, work + 4 * D, s);
		/* the three backwards' parameter gradients in one launch, side by side */
		t.n = 3;
		for (int i = 0; i < 3; i++)
		{
			t.partials[i] = work + 2 * D * i;
			t.chunks[i] = i < 2 ? 1 : 10;
			t.d[i] = D;
		}
		t.dgamma[0] = g, t.dbeta[0] = b;
		t.dgamma[1] = dg1, t.dbeta[1] = db1;
		t.dgamma[2] = m2, t.dbeta[2] = s2;
		k_layernorm_dparams_totals(&t, D, s);
	}
	sh.batch = 2, sh.num_heads = H, sh.head_dim = DK, sh.q_start = qs, sh.k_start = qs, sh.p_start = ps;
	sh.causal = true, sh.dropout = 0.2f, sh.seed = 3, sh.stream = 4, sh.max_q = 4, sh.max_k = 4;
	sh.p_total = ps_h[2];
	for (int bf16 = 0; bf16 < 2; bf16++)	/* tiled (fp32: SIMT; bf16: the short pairs'), then per row, kept */
	{
		__nv_bfloat16 *const copies[3] = {c16, c16 + D, c16 + 2 * D};

		k_attention(out, c16, lse, NULL, x, 3 * D, x + D, x + 2 * D, 3 * D, &sh, bf16, s);
		k_attention_backward(y, y + D, y + 2 * D, copies, out, lse, x, 3 * D, x + D, x + 2 * D, 3 * D, &sh, bf16, work,
							 s);
		k_attention(out, NULL, lse, probs, x, 3 * D, x + D, x + 2 * D, 3 * D, &sh, bf16, s);
	}
	{
		/*
		 * sentences of 37 and 70 tokens: several chunks, warps and row tiles of both tiled families;
		 * in bf16 the 37 to the short pairs' kernels (3 row groups on 2 warps), the 70 to the tiled
		 */
		enum {A = 37 + 70};
		float	   *xa = device_randoms(A * 3 * D, &state),
				   *ya = device_randoms(A * 3 * D, &state),
				   *ca = device_randoms(A * D, &state),
				   *la = device_randoms(A * H, &state);
		int32_t		qa_h[3] = {0, 37, A};
		int64_t		pa_h[3] = {0, H * 37 * 37, H * (37 * 37 + 70 * 70)};
		TfAttentionShape long_sh = sh;

		long_sh.q_start = long_sh.k_start = device_copy(qa_h, 3);
		long_sh.p_start = device_copy(pa_h, 3);
		long_sh.max_q = long_sh.max_k = 70, long_sh.p_total = pa_h[2];
		for (int bf16 = 0; bf16 < 2; bf16++)
		{
			__nv_bfloat16 *const copies[3] = {c16, c16 + D, c16 + 2 * D};

			k_attention(ca, c16, la, NULL, xa, 3 * D, xa + D, xa + 2 * D, 3 * D, &long_sh, bf16, s);
			k_attention_backward(ya, ya + D, ya + 2 * D, copies, ca, la, xa, 3 * D, xa + D, xa + 2 * D, 3 * D, &long_sh,
								 bf16, work, s);
		}
	}
	k_cross_entropy(logits, NULL, false, false, labels, R, V, V, 0, 0.1f, rows, s);
	k_accumulate(acc, rows, R, s);
	k_cross_entropy(logits, l16, true, true, labels, R, V, V, 0, 0.1f, rows, s);
	k_cross_entropy16(l16, true, labels, R, V, V, 0, 0.1f, rows, s);	/* bf16 logits, the gradient over them */
	k_log_softmax_topk(logits, R, V, V, 4, top, top_id, 0, 3, inv, s);
	k_sum_squares(x, R * D, acc, partials, s);
	k_adam(x, c16, y, out, work, R * D, 0.5f, 1e-3f, 0.9f, 0.98f, 1e-9f, 0.1f, 0.02f, s);
	k_gather(out, D, x, D, ids, R, D, s);
	k_gather(x, D, x, D, qs, 3, D, s);
	/* bf16: rounding, caches written, reordered in place and read by attention */
	k_round_bf16(cache, x, R * 2 * D, s);
	k_gather_to_bf16(cache, 2 * D, x + D, 3 * D, NULL, R, 2 * D, s);
	k_gather_bf16(cache + 2 * D, 2 * D, cache, 2 * D, NULL, 2, 2 * D, s);
	k_gather_bf16(cache, 2 * D, cache, 2 * D, qs, 2, 2 * D, s);
	sh.kv_cache = true;
	k_attention(out, NULL, NULL, probs, x, 3 * D, (const float *) cache, (const float *) (cache + D), 2 * D, &sh, true, s);
	k_attention(out, c16, NULL, NULL, x, 3 * D, (const float *) cache, (const float *) (cache + D), 2 * D, &sh, true, s);
	printf("kernels run: %s\n", cudaGetErrorString(cudaGetLastError()));
	return 0;
}
