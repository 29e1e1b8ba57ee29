# CPU mutants for scripts/cpu-mutants: each plants one plausible bug in the
# 8-bit optimizer code and its plumbing (the quantile maps, the SIMD
# quantizers, the 8-bit AdamW/SGD kernels, optimizer state layout, options,
# checkpoints) or in the stable embedding (LayerNorm, init, config). A mutant
# is (id, file, old, new, description): `old` must occur exactly once in
# `file`, and is replaced by `new`. The ids are those of the two runs
# recorded in tests/mutants/run1-20261123.log (Q L S V A G O F) and
# run2-20261123.log (LN LE LY CF CI OP RP OT CK SF).
#
# OT4 OT5 CK6 CK7 CK8 CK14 were re-pointed at dd914bd, whose options and
# checkpoint code moved on from the runs' text (same bugs planted). CK1-CK5
# and CK13 were re-pointed when resume learned to convert optimizer state
# (a changed block or threshold now converts instead of being refused: the
# mutants drop the conversion or the checks on the metadata), and CV1-CV7
# added for convert.c. O9 OP3 OP4 CV1 were re-pointed when the moment names
# and maps moved into optim_moment_name / optim_moment_map, and SF1 SF2 when
# safetensors_load_raw became a copy of safetensors_view_raw (same bugs).
# On 2026-11-24 the checkpoint loading moved into ckpt_load.c (CK1-CK5,
# CK8-CK10, CK12-CK14) and the state tensors' fp32 count into ckpt_format.h
# (CK11); F1 was re-pointed at the overflow check that joined its line, and
# A6 A7 at moments_tail, the one scalar tail of the vector passes since fbfdaf2,
# and CI1 at init's on/off --stable-embedding (6e6368f). Run then: F1, RP1-RP4,
# CK1, CK2, CK11, CK13, A6, A7 and CI1 all killed (verify-20261124-split.log).
#
# DC1-DC7 (2026-11-24) plant bugs in sample's key/value-cache decoder: the
# cache positions' RoPE angles, the cached attention's causal offset, the
# refill rule, the placement's count of the decoder's bytes, the head's row,
# the value cache's row. Run at 2086c5d: all 7 killed
# (verify-20261124-decoder.log). DC8 (the tied embedding released early)
# and DC9 (scratch beyond the count) came from the decoder's review, with
# the tests that kill them; DC6 was re-pointed when a pass became one
# per feed (layer-major over its chunks). All nine run at 128d409 (the
# commit adding DC8/DC9): all killed (verify-20261124-decoder2.log).
#
# LE7 was re-pointed on 2026-11-24 (the decoder's decode_rest_floats has
# the same line): it now names the line before it in acts_rest_floats.
# Run at 5d0a6c3's parent: killed (verify-20261124-le7.log).
#
# Q11 is no longer equivalent since 2026-11-25: without ops_q8_scale's cap a
# block whose absmax is at most 2^-128 scales by inf (killed by
# quant::adamw8_tiny_moments_equal_unfused; verify-20261125-q11.log). Q13
# (2026-11-25) drops the cap itself, which only quant::scale_edges sees.
#
# PL1 PL3 PL7 LE7 OT2-OT5 OT9 were re-pointed on 2026-11-25: their lines had
# moved on since they were written (wrote, sat_add, host_scratch, the matmul
# workspace term, ST_CHECK_USAGE), and a whole-list run stopped on them.
# Run then: see tests/mutants/verify-20261125-repointed.log.
#
# EQUIVALENT lists the mutants that change no output, with the reason; the
# script skips them unless given --all, and expects them to survive.

# PL1-PL4 (2026-11-24) plant bugs in per-layer GaLore with offload: the
# refreshed projector not written home, the projectors put back by a
# skipped step not written home, the accumulators left out of the host
# budget, and accumulators of the full matrices' size. Run at b840444
# (suite offload): all 4 killed (verify-20261124-perlayer-offload.log).
# PL5-PL7 came from the review of the threaded updates and the budget: the
# projector backups cleared while the previous step's updates still read
# them, the update reading pl->t (moved on by the next step), and the
# accumulators left out of the store's host tier (evaluation groups sized
# past the budget). All seven run at 7dca4c9: all killed
# (verify-20261124-perlayer-offload2.log).

QM = 'src/optim/quantmap.c'; Q8 = 'src/ops/cpu/quant8.c'; QS = 'src/ops/cpu/quant8_simd.h'
QV = 'src/ops/cpu/quant8_vbmi.c'; AD = 'src/ops/cpu/adam8.c'; SG = 'src/ops/cpu/sgd8.c'
OP = 'src/optim/optim.c'; LN = 'src/ops/cpu/layernorm.c'; LL = 'src/model/llama.c'
LY = 'src/model/layout.c'; LH = 'src/model/llama.h'; CF = 'src/model/config.c'
CI = 'src/cli/cmd_init.c'; TR = 'src/trainer/trainer.c'; OT = 'src/trainer/options.c'
CK = 'src/trainer/checkpoint.c'; CL = 'src/trainer/ckpt_load.c'
CH = 'src/trainer/ckpt_format.h'; SF = 'src/io/safetensors.c'; CV = 'src/trainer/convert.c'
AT = 'src/ops/cpu/attention.c'; GE = 'src/engine/generate.c'; DE = 'src/engine/decode.c'
PL = 'src/trainer/perlayer.c'; PC = 'src/engine/place.c'; UP = 'src/engine/updater.c'

M = [
# ======== per-layer GaLore with offload (2026-11-24)
('PL1', PL, 'store_release(pl->store, unit, ST_SLAB_S, wrote);', 'store_release(pl->store, unit, ST_SLAB_S, 0);', 'a refreshed projector is not written home'),
('PL2', PL, 'memcpy(sb + ps->proj_off, pl->bak + pl->bak_off[k], galore_proj_numel(ps) * sizeof(float));\n\t\tstore_release(pl->store, u, ST_SLAB_S, 1);', 'memcpy(sb + ps->proj_off, pl->bak + pl->bak_off[k], galore_proj_numel(ps) * sizeof(float));\n\t\tstore_release(pl->store, u, ST_SLAB_S, 0);', 'the projectors a skipped step puts back are not written home'),
('PL4', PL, 'return o->ps[i].galore ? o->ps[i].state_numel : o->m->params[i].numel;', 'return o->m->params[i].numel;', 'full-size accumulators for the GaLore matrices'),
('PL5', PL, '\tpl->fresh = 1;\n}', '\tpl->fresh = 1;\n\tpl->n_bak = 0;\n}', 'the backups cleared when the step begins, under the previous step\'s updates'),
('PL6', PL, 'galore_apply(pl->ops, o, i, w + p->offset, pl->acc[i], sb, t, lr, grad_scale, wd);', 'galore_apply(pl->ops, o, i, w + p->offset, pl->acc[i], sb, pl->t, lr, grad_scale, wd);', 'the update reads the next step\'s t'),
('PL7', 'src/trainer/tiers.c', '\t\ts->store.tiers[ST_TIER_HOST].used = s->store.tiers[ST_TIER_HOST].peak =\n\t\t\tpl->host_fixed + pl->host_scratch;', '\t\ts->store.tiers[ST_TIER_HOST].used = s->store.tiers[ST_TIER_HOST].peak =\n\t\t\tpl->host_scratch;', "the accumulators not charged to the store's host tier"),
('PL3', PC, 'size_t host = sat_add(sat_add(o->host_reserved, o->host_fixed), o->host_scratch);', 'size_t host = sat_add(o->host_reserved, o->host_scratch);', 'the accumulators not counted in the host budget'),
# ======== the key/value-cache decoder (2026-11-24)
('DC1', LL, 'const float *cos_tab = d->rope_cos + (size_t)pos * hd / 2;', 'const float *cos_tab = d->rope_cos;', 'cached tokens rotated by position 0'),
('DC2', AT, 'int nv = q_off + q0 + r + 1;', 'int nv = q0 + r + 1;', 'cached attention ignores the earlier keys'),
('DC3', GE, 'const int keep = T - T / 2;', 'const int keep = T / 2 + 1;', 'refill keeps one token too many'),
('DC4', GE, 'if (n - start > T) {', 'if (n - start >= T) {', 'refill one token early'),
('DC5', DE, 'decode_rest_floats(m, decode_rows(t_max), t_max)) *', 'decode_rest_floats(m, 1, t_max)) *', 'placement counts one row of scratch'),
('DC6', DE, 'llama_head_decode(ops, m, a, wh, tied ? wte : NULL, a->x + (size_t)(n - 1) * C);', 'llama_head_decode(ops, m, a, wh, tied ? wte : NULL, a->x);', 'scores the pass\'s first token'),
('DC8', DE, '	if (!tied) /* a tied head reads the embedding */', '	if (1) /* a tied head reads the embedding */', 'tied embedding released before the head reads it'),
('DC9', DE, 'decode_rest_floats(m, rows, t_max) * sizeof(float)));', 'decode_rest_floats(m, ST_DECODE_ROWS, t_max) * sizeof(float)));', 'allocates a whole chunk of scratch for a shorter cache'),
('DC7', LL, 'float *k = kc + (size_t)pos * KD, *v = vc + (size_t)pos * KD;', 'float *k = kc + (size_t)pos * KD, *v = vc;', 'values always written at row 0'),
# ======== run 1: the 8-bit quantizer and optimizer kernels
# ---- quantmap.c
('Q1', QM, 'double step = (1.0 - 0.1) / (double)(k - 1), b[130];', 'double step = (1.0 - 0.1) / (double)(k), b[130];', 'linspace step /k instead of /(k-1)'),
('Q2', QM, 'b[j] = j < k / 2 ?', 'b[j] = j <= k / 2 ?', 'linspace half split j<=k/2'),
('Q3', QM, 'double mean = (b[j] + b[j + 1]) / 2.0;', 'double mean = b[j];', 'entries are linspace points, not means'),
('Q4', QM, 'for (int e = i; e < 6; e++)', 'for (int e = i; e <= 6; e++)', 'decade scale off by one (10^(i-7))'),
('Q5', QM, 'if (k + s <= 254 && map[k + s] <= x)', 'if (k + s <= 254 && map[k + s] < x)', 'binary search <= -> <'),
('Q6', QM, 'return (uint8_t)((double)x > mid ? k + 1 : k);', 'return (uint8_t)((double)x >= mid ? k + 1 : k);', 'tie goes to upper index'),
('Q7', QM, 'if (k + s <= 254 && map[k + s] <= x)', 'if (k + s <= 255 && map[k + s] <= x)', 'search bound 254->255 (reads map[256])'),
('Q8', QM, '\tif (x != x) /* NaN */\n\t\tx = 0.0f;\n', '', 'NaN -> code of 0 removed'),
('Q9', QM, 'amax = a > amax ? a : amax; /* a NaN never wins */', 'amax = amax >= a ? amax : a;', 'reference absmax lets NaN win'),
('Q10', QM, '\t\tfor (size_t i = 0; i < len; i++) {\n\t\t\tfloat a', '\t\tfor (size_t i = 0; i + 1 < len; i++) {\n\t\t\tfloat a', 'reference absmax skips last element of block'),
('Q11', QM, 'const float s = ops_q8_scale(amax);', 'const float s = 1.0f / amax;', 'the reference scales by a raw 1/absmax (inf for a zero block or one at most 2^-128)'),
('Q13', 'src/ops/ops.h', 'return r < FLT_MAX ? r : FLT_MAX;', 'return r;', 'ops_q8_scale without its FLT_MAX cap'),
('Q12', QM, 'x[i] = map[codes[i]] * absmax[i / (size_t)block];', 'x[i] = map[codes[i]] * absmax[(i + 1) / (size_t)block];', 'dequant block index off by one'),
# ---- quant8.c
('L1', Q8, 'for (int s = Q8_SCALAR; s < Q8_NSIMD; s++)\n\t\tif (q8_simd_supported', 'for (int s = Q8_SCALAR; s < Q8_TUNED; s++)\n\t\tif (q8_simd_supported', 'pick never chooses tuned'),
('L4', Q8, 'if (x > thr[c + s - 1])', 'if (x >= thr[c + s - 1])', 'count_above > -> >='),
('L5', Q8, '\t\tif ((double)f > mid)\n\t\t\tf = nextafterf(f, -INFINITY);\n', '', 'thr rounded to nearest, not down'),
('L6', Q8, 't->thr[255] = INFINITY;', 't->thr[255] = 1.0f;', 'thr[255] sentinel 1.0 instead of inf'),
('L9', Q8, 'lut_set(t, nb + bk, c0, (bits_of(t->thr[c0]) & mask) ^ mask);', 'lut_set(t, nb + bk, c0, bits_of(t->thr[c0]) & mask);', 'negative threshold bits not complemented'),
('L10', Q8, 'const int c0 = k + 1 - cnt;', 'const int c0 = k - cnt;', 'negative bucket base code off by one'),
('L11', Q8, 'lut_set(t, b, 255, mask);', 'lut_set(t, b, 254, mask);', 'buckets above last midpoint get 254'),
('L12', Q8, 't->packed = most <= 1 && !edge;', 't->packed = most <= 1;', 'packed ignores edge buckets'),
('L13', Q8, 't->extra = most > 1 ? most - 1 : 0;', 't->extra = most > 2 ? most - 2 : 0;', 'one extra compare too few'),
('L15', Q8, 'fits = count_above(t->thr, hi) - count_above(t->thr, lo) <= 1;', 'fits = count_above(t->thr, hi) - count_above(t->thr, lo) <= 2;', 'register table allows 2 midpoints per bucket'),
('L18', Q8, '\t\t\tnext = k ^ 1;\n\t\t\treturn &cache[k];', '\t\t\treturn &cache[k];', 'LUT cache: hit does not update LRU'),
('L19', Q8, '!memcmp(cache[k].map, map, sizeof cache[k].map)', '!memcmp(cache[k].map, map, sizeof cache[k].map / 2)', 'LUT cache key compares first half of map only'),
('L20', Q8, '\t\t_mm256_storeu_ps(x + i, _mm256_mul_ps(q8_lookup8_avx2(codes + i, t->map), s));\n\tdecode_scalar(x + i, codes + i, n - i, absmax, t);', '\t\t_mm256_storeu_ps(x + i, _mm256_mul_ps(q8_lookup8_avx2(codes + i, t->map), s));', 'avx2 decode tail dropped'),
('L21', Q8, 'for (; i + 8 <= n; i += 8) /* vmaxps', 'for (; i + 8 < n; i += 8) /* vmaxps', 'avx2 absmax loop bound < (tail covers)'),
('L22', Q8, 'return q8_hmax_avx512(m, absmax_scalar(x + i, n - i));', 'return q8_hmax_avx512(m, 0.0f);', 'avx512 absmax tail dropped'),
('L23', Q8, '\t\tq8_store16_avx2(codes + i, c0, c1);\n\t}\n\tfor (; i < n; i++)', '\t\tq8_store16_avx2(codes + i, c0, c1);\n\t}\n\tfor (; i + 1 < n; i++)', 'avx2 encode tail misses last element'),
('L24', Q8, 'q8_encode16_avx512(codes + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), s), &q);', 'q8_encode16_avx512(codes + i, _mm512_div_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(1.0f / scale)), &q);', 'avx512 encode divides by 1/scale instead of multiplying'),
('L25', Q8, 'return s == Q8_AVX512VBMI ? &q8_kernels_vbmi :', 'return s == Q8_AVX512VBMI ? &kernels[2] :', 'vbmi variant silently maps to avx512'),
# ---- quant8_simd.h
('S1', QS, 'return a < 0 ? 0 : a > nb - 1 ? nb - 1 : a;', 'return a < 0 ? 0 : a > nb ? nb - 1 : a;', 'bucket clamp off by one (a==nb escapes)'),
('S2', QS, 'c = (int)(e >> 24) + (low > (e & 0xffffffu));', 'c = (int)(e >> 24) + (low >= (e & 0xffffffu));', 'scalar packed compare > -> >='),
('S3', QS, 'low = (bits & mask) ^ (neg ? mask : 0);', 'low = bits & mask;', 'scalar: negative low bits not complemented'),
('S4', QS, 'return x != x ? (uint8_t)t->zero : (uint8_t)c;', 'return (uint8_t)c;', 'scalar encode NaN fix-up removed'),
('S5', QS, 'return a > m ? a : m;', 'return m > a ? m : a;', 'q8_absmax1 lets NaN win'),
('S6', QS, '__m256i a = _mm256_srl_epi32(_mm256_sub_epi32(_mm256_max_epu32(u, q->base), q->base), q->shift);', '__m256i a = _mm256_srl_epi32(_mm256_sub_epi32(u, q->base), q->shift);', 'avx2 bucket: no clamp below'),
('S7', QS, '\treturn _mm256_blendv_epi8(c, _mm256_set1_epi32(t->zero), _mm256_castps_si256(nan));', '\t(void)nan;\n\treturn c;', 'avx2 NaN fix-up removed'),
('S8', QS, '_mm_shuffle_epi32(b, _MM_SHUFFLE(3, 1, 2, 0))', '_mm_shuffle_epi32(b, _MM_SHUFFLE(3, 2, 1, 0))', 'avx2 store16 lane order not fixed'),
('S10', QS, '\tfor (int l = 0; l < 8; l++)\n\t\tr = lanes[l] > r', '\tfor (int l = 0; l < 7; l++)\n\t\tr = lanes[l] > r', 'avx2 hmax skips lane 7'),
('S11', QS, 'const __mmask16 b6 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(64));', 'const __mmask16 b6 = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(32));', 'avx512 lookup tests bit 5 for bit 6'),
('S12', QS, '__mmask16 gt = _mm512_cmpgt_epi32_mask(', '__mmask16 gt = _mm512_cmpge_epi32_mask(', 'avx512 packed compare > -> >='),
('S13', QS, 'c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(v, th, _CMP_GT_OQ), c, one);', 'c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(v, th, _CMP_GE_OQ), c, one);', 'avx512 unpacked compare > -> >='),
('S14', QS, '_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));', '_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0xffffffff)));', 'avx512 abs does not clear sign'),
('S15', QS, '.base = _mm512_set1_epi32((int)(Q8_TINY_BITS - (1u << t->shift))),', '.base = _mm512_set1_epi32((int)(Q8_TINY_BITS)),', 'avx512 bucket base off by one bucket'),
# ---- quant8_vbmi.c
('V1', QV, '\tif (i < n)\n\t\tq8_kernels_get(Q8_AVX512)->decode', '\tif (i + 1 < n)\n\t\tq8_kernels_get(Q8_AVX512)->decode', 'vbmi decode: 1-element tail dropped'),
('V2', QV, 'for (; i + 64 <= n; i += 64) {\n\t\t__m512i v[4];', 'for (; i + 64 < n; i += 64) {\n\t\t__m512i v[4];', 'vbmi decode loop bound < (tail covers)'),
('V3', QV, '\tif (!t->rok) {\n\t\tavx512->encode(codes, x, n, scale, t);\n\t\treturn;\n\t}\n', '', 'vbmi encode: no fallback when register table unusable'),
('V4', QV, '*special = _mm512_cmpge_epu16_mask(a, _mm512_set1_epi16(0x7f80));', '*special = _mm512_cmpgt_epu16_mask(a, _mm512_set1_epi16(0x7f80));', 'vbmi special-lane test >= -> >'),
('V5', QV, 'a = _mm512_min_epu16(_mm512_max_epu16(a, _mm512_set1_epi16(Q8_R_EMIN << 7)),', 'a = _mm512_min_epu16((a),', 'vbmi key: no clamp below EMIN'),
('V6', QV, 'const __mmask64 half = _mm512_kunpackd(_mm512_test_epi16_mask(k1, b8),\n\t\t\t\t\t\t       _mm512_test_epi16_mask(k0, b8));', 'const __mmask64 half = _mm512_kunpackd(_mm512_test_epi16_mask(k0, b8),\n\t\t\t\t\t\t       _mm512_test_epi16_mask(k1, b8));', 'vbmi key bit-8 halves swapped'),
('V7', QV, '\t\tc = _mm512_mask_add_epi8(c, up, c, _mm512_set1_epi8(1));\n', '\t\t(void)up;\n', 'vbmi: + (x > thr[c0]) dropped'),
('V8', QV, '\t\tfor (uint64_t sp = (uint64_t)sp1 << 32 | sp0; sp; sp &= sp - 1) {', '\t\tfor (uint64_t sp = 0 & ((uint64_t)sp1 << 32 | sp0); sp; sp &= sp - 1) {', 'vbmi inf/NaN scalar fix-up removed'),
('V9', QV, 'gt[q] = _mm512_cmp_ps_mask(y[q], _mm512_castsi512_ps(th[q]), _CMP_GT_OQ);', 'gt[q] = _mm512_cmp_ps_mask(y[q], _mm512_castsi512_ps(th[q]), _CMP_GE_OQ);', 'vbmi compare > -> >='),
('V10', QV, 'if (i < n) /* the last n % 64 values */', 'if (i + 1 < n) /* the last n % 64 values */', 'vbmi encode: 1-element tail dropped'),
('V11', QV, '#define ODD(i) (uint16_t)(2 * (i) + 1)', '#define ODD(i) (uint16_t)(2 * (i))', 'vbmi key from low half of float'),
# ---- adam8.c
('A1', AD, '.omb2 = 1.0f - a->beta2,', '.omb2 = 1.0f - a->beta1,', '1-beta2 uses beta1'),
('A2', AD, '.step = a->lr * c2 / a->bc1,', '.step = a->lr * c2,', 'bias correction 1 skipped'),
('A3', AD, '.eps_hat = a->eps * c2,', '.eps_hat = a->eps,', 'eps not scaled by sqrt(bc2)'),
('A4', AD, '.decay = 1.0f - a->lr * a->weight_decay,', '.decay = 1.0f - a->weight_decay,', 'decoupled decay not scaled by lr'),
('A5', AD, '\t\tfloat pi = p[i] - k->step * (m[i] / (sqrtf(v[i]) + k->eps_hat));\n\t\tp[i] = pi * k->decay;', '\t\tp[i] = p[i] * k->decay - k->step * (m[i] / (sqrtf(v[i]) + k->eps_hat));', 'decay applied before update (scalar path)'),
('A6', AD, '\t\txm = q8_absmax1(m[i], xm);\n', '', 'vector passes\' moments tail left out of m absmax'),
('A7', AD, 'update(p + i0, m + i0, v + i0, n - i0, k);', 'update(p + i0, m + i0, v + i0, n - i0 - (n > i0), k);', 'vector passes\' tail update misses last element'),
('A8', AD, 'if (q->simd >= Q8_AVX512) {', 'if (q->simd > Q8_AVX512) {', 'avx512 variant takes the generic moments path'),
('A9', AD, '\tif (len > Q8_CHUNK)\n\t\tfor', '\tif (len >= Q8_CHUNK)\n\t\tfor', 'two-pass path also for len == CHUNK'),
('A10', AD, '\t\tif (len <= Q8_CHUNK)\n\t\t\tam = x, av = y;', '\t\tif (len < Q8_CHUNK)\n\t\t\tam = x, av = y;', 'one-pass absmax skipped for len == CHUNK'),
('A11', AD, '\t\t\tam = x > am ? x : am;', '\t\t\tam = x;', 'two-pass m absmax = last chunk only'),
('A12', AD, '\tm_absmax[b] = am;\n\tv_absmax[b] = av;\n}', '\tif (b0 + len < n)\n\t\tm_absmax[b] = am;\n\tv_absmax[b] = av;\n}', 'last block m absmax not stored'),
('A13', AD, 'nblocks = (n + block - 1) / block;', 'nblocks = n / block;', 'partial last block dropped'),
('A14', AD, '\t\tq->decode(vb, v_codes + b0 + c0, cl, av_old, lut_v);\n\t\tfloat x, y;\n\t\tmoments_absmax(q, p', '\t\tq->decode(vb, v_codes + b0 + c0, cl, am_old, lut_v);\n\t\tfloat x, y;\n\t\tmoments_absmax(q, p', 'v decoded with m absmax'),
('A15', AD, '\t\tv[i] = k->b2 * v[i] + k->omb2 * (gi * gi);\n\t}\n}', '\t\tv[i] = k->b2 * v[i] + k->omb2 * gi * gi;\n\t}\n}', 'v update reassociated (scalar path)'),
# AP1-AP7 (2026-11-25): the pipelined 8-bit AdamW step (adam8.c's
# adam8_pipelined and moments_encode_*): each killed by
# quant::adamw8_fused_equals_unfused when planted by hand at the commit
# adding them.
('AP1', AD, '\tif (b_hi > b_lo) {\n\t\tq->encode(pb.mc', '\tif (0) {\n\t\tq->encode(pb.mc', 'pipelined: the last block is never encoded'),
('AP2', AD, 'q8_encode16_avx512(pb->mc + i, _mm512_mul_ps(_mm512_loadu_ps(pb->m + i), sm), &qm);', 'q8_encode16_avx512(pb->mc + i, _mm512_mul_ps(_mm512_loadu_ps(m + i), sm), &qm);', 'pipelined avx512: encodes the current block\'s m'),
('AP3', AD, 'pb = (struct adam8_prev){ m_codes + b0, v_codes + b0, m, v, ops_q8_scale(am),\n\t\t\t\t\t  ops_q8_scale(av) };', 'pb = (struct adam8_prev){ m_codes + b0, v_codes + b0, m, v, ops_q8_scale(av),\n\t\t\t\t\t  ops_q8_scale(am) };', 'pipelined: m and v scales swapped'),
('AP4', AD, 'nwhole * t / nt, nwhole * (t + 1) / nt', 'nwhole * t / nt + (t > 0), nwhole * (t + 1) / nt', 'pipelined: a thread skips its first block'),
('AP5', AD, 'q8_encode8_avx2(_mm256_mul_ps(_mm256_loadu_ps(pb->v + i + 8), sv), &qv));', 'q8_encode8_avx2(_mm256_mul_ps(_mm256_loadu_ps(pb->v + i + 8), sv), &qm));', 'pipelined avx2: v encoded with the m table'),
('AP6', AD, '\t\tfirst = nwhole;\n', '\t\tfirst = nwhole - 1;\n', 'the last whole block stepped twice'),
('AP7', AD, 'float *m = mb[b & 1], *v = vb[b & 1];', 'float *m = mb[0], *v = vb[0];', 'pipelined: one buffer, the previous block overwritten'),
('A16', AD, '*xm = _mm512_max_ps(q8_abs_avx512(mi), *xm);', '*xm = _mm512_max_ps(*xm, q8_abs_avx512(mi));', 'avx512 m absmax lets NaN win'),
# ---- sgd8.c
('G1', SG, 'const float old = a->first_step ? 0.0f : mom_absmax[b];', 'const float old = mom_absmax[b];', 'first step reads stored absmax'),
('G2', SG, '\t\t\tmom[i] = gi;\n', '\t\t\tmom[i] = mu * mom[i] + gi;\n', 'first step reads (uninitialized) momentum'),
('G4', SG, '\t\t\tp[i] = p[i] - lr * mi;', '\t\t\tp[i] = p[i] - lr * (g[i] * gs + wd * p[i]);', 'p updated with gradient, not momentum'),
('G5', SG, '\t\t\t\tif (!a->first_step)\n\t\t\t\t\tq->decode(mb, mom_codes + b0 + c0, cl, old, lut);\n\t\t\t\tsgd_update(p', '\t\t\t\tq->decode(mb, mom_codes + b0 + c0, cl, old, lut);\n\t\t\t\tsgd_update(p', 'decode also on first step'),
('G6', SG, 'amax = x > amax ? x : amax;', 'amax = x;', 'two-pass absmax = last chunk only'),
('G7', SG, 'if (len <= Q8_CHUNK)\n\t\t\t\t\tamax = q->absmax(mb, cl);', 'if (len < Q8_CHUNK)\n\t\t\t\t\tamax = q->absmax(mb, cl);', 'one-pass absmax skipped for len == CHUNK'),
('G8', SG, 'p[i] = p[i] - lr * (g[i] * gs + wd * p[i]);\n\t\treturn;', 'p[i] = p[i] - lr * (g[i] * gs);\n\t\treturn;', 'stateless path drops weight decay'),
('G9', SG, '\t\t\tmom_absmax[b] = amax;', '\t\t\tif (b + 1 < nblocks)\n\t\t\t\tmom_absmax[b] = amax;', 'last block absmax not stored'),
('G10', SG, 'sgd_update(pb, mb, g + b0 + c0, cl, a);', 'sgd_update(p + b0 + c0, mb, g + b0 + c0, cl, a);', 'absmax pass updates p itself (double update)'),
# ---- optim.c
('O1', OP, '(long)ps->state_numel >= c->quant_min_numel', '(long)ps->state_numel > c->quant_min_numel', 'quant-min-size exclusive'),
('O2', OP, '(long)ps->state_numel >= c->quant_min_numel &&\n\t\t\t p->role != ST_ROLE_EMBED;', '(long)ps->state_numel >= c->quant_min_numel;', 'embeddings get 8-bit state'),
('O3', OP, 'ps->n_blocks = ps->q8 ? (ps->state_numel + (size_t)c->quant_block - 1) /', 'ps->n_blocks = ps->q8 ? (ps->state_numel + 0) /', 'n_blocks rounds down'),
('O4', OP, 'const int n_states = is_adam(c->kind) ? 2 : c->momentum != 0.0f ? 1 : 0;', 'const int n_states = is_adam(c->kind) ? 2 : 1;', 'SGD without momentum keeps a state'),
('O5', OP, '*cur = align64(*cur + ps->n_blocks * sizeof(float));', '*cur = align64(*cur + ps->n_blocks);', 'absmax region sized in bytes not floats'),
('O6', OP, 'const float bc2 = (float)(1.0 - pow(c->beta2, (double)t));', 'const float bc2 = (float)(1.0 - pow(c->beta1, (double)t));', 'bc2 from beta1'),
('O7', OP, '.first_step = t == 1, .block = c->quant_block,', '.first_step = t == 0, .block = c->quant_block,', 'sgd8 first_step never set'),
('O8', OP, 'const float wd = optim_param_decays(c, p) ? c->weight_decay : 0.0f;', 'const float wd = c->weight_decay;', 'weight decay on every role'),
('O9', OP, '.map_v = optim_moment_map(o, 1)};', '.map_v = optim_moment_map(o, 0)};', 'v uses the signed map'),
('O10', OP, 'return k == ST_OPT_ADAMW8 || k == ST_OPT_SGD8 || k == ST_OPT_GALORE_ADAMW8;', 'return k == ST_OPT_ADAMW8 || k == ST_OPT_SGD8;', 'galore-adamw8bit not 8-bit'),
('O11', OP, 'return block >= 16 && block <= 65536', 'return block >= 8 && block <= 65536', 'quant-block lower bound 8'),
('O12', OP, ' && (block & (block - 1)) == 0;', ';', 'power-of-two check dropped'),
# ---- extras (non-finite detection lives outside optim.c)
('F1', 'src/trainer/trainer.c', 'if (!isfinite(gnorm) || !isfinite(loss) || overflow) {', 'if (!isfinite(loss) || overflow) {', 'non-finite gradient not detected'),
('F2', 'src/util/finite.h', '\t\t\tbad |= !(fabsf(x[i]) <= FLT_MAX);', '\t\t\tbad |= fabsf(x[i]) > FLT_MAX;', 'first_nonfinite misses NaN'),
# ======== run 2: 8-bit plumbing (state layout, options, checkpoints, report)
# and the stable embedding
# ---- layernorm.c
('LN1', LN, 'double r = 1.0 / sqrt(v / c + (double)eps);', 'double r = 1.0 / sqrt(v / (c - 1) + (double)eps);', 'unbiased (Bessel) variance'),
('LN2', LN, 'double r = 1.0 / sqrt(v / c + (double)eps);', 'double r = 1.0 / sqrt(v / c);', 'eps dropped'),
('LN3', LN, 'double r = 1.0 / sqrt(v / c + (double)eps);', 'double r = 1.0 / (sqrt(v / c) + (double)eps);', 'eps outside the sqrt'),
('LN4', LN, 'oi[j] = (float)(((double)xi[j] - mu) * r) * w[j] + b[j];', 'oi[j] = (float)(((double)xi[j] - mu) * r) * w[j];', 'forward drops bias'),
('LN5', LN, 'oi[j] = (float)(((double)xi[j] - mu) * r) * w[j] + b[j];', 'oi[j] = (float)(((double)xi[j] - mu) * r) * b[j] + w[j];', 'forward gain/bias swapped'),
('LN6', LN, '\t\tdouble s = 0.0;\n', '\t\tfloat s = 0.0f;\n', 'row mean summed in float'),
('LN7', LN, '\t\t\t\t\tab[j] += gi[j];\n', '', 'no bias gradient'),
('LN8', LN, 'dw[j0 + j] += aw[j];', 'dw[j0 + j] = aw[j];', 'dw overwritten, not accumulated'),
('LN9', LN, 'di[j] = (float)(r * ((double)gi[j] * w[j] - s1 -\n\t\t\t\t\t\t     (((double)xi[j] - mu) * r) * s2));', 'di[j] = (float)(r * ((double)gi[j] * w[j] - s1));', 'dx drops the xh*mean(dxh xh) term'),
('LN10', LN, '\t\t\ts1 /= c;\n', '', 'mean(dxh) not divided by c'),
('LN11', LN, 'di[j] = (float)(r * ((double)gi[j] * w[j] - s1 -', 'di[j] = (float)(((double)gi[j] * w[j] - s1 -', 'dx missing rstd factor'),
('LN12', LN, 'int nblk = (c + LN_COL_BLOCK - 1) / LN_COL_BLOCK;', 'int nblk = c / LN_COL_BLOCK;', 'partial last column block dropped'),
('LN13', LN, 'aw[j] += gi[j] * (float)(((double)xi[j] - mu) * r);', 'aw[j] += gi[j] * xi[j];', 'dw uses raw x, not x-hat'),
('LN14', LN, 'double g = (double)gi[j] * w[j];', 'double g = (double)gi[j];', 'backward stats ignore the gain'),
('LN15', LN, 'rstd[i] = (float)r;', 'rstd[i] = (float)(1.0 / r);', 'stores std instead of rstd'),
('LN16', LN, '#pragma omp for schedule(static)\n\t\tfor (int blk', 'for (int blk', 'dw/db loop not work-shared (every thread adds)'),
('LN17', LN, '#pragma omp for schedule(static)\n\t\tfor (int i = 0; i < n; i++) {', '#pragma omp for schedule(static) nowait\n\t\tfor (int i = 0; i < n; i++) {', 'dx loop nowait (harmless)'),
# ---- llama.c / llama.h (embedding norm)
('LE1', LL, 'C, ST_EMBED_NORM_EPS);', 'C, m->cfg.norm_eps);', 'embed LayerNorm uses rms_norm_eps'),
('LE2', LH, '#define ST_EMBED_NORM_EPS 1e-5f', '#define ST_EMBED_NORM_EPS 1e-6f', 'embed LayerNorm eps 1e-6'),
('LE3', LL, 'a->emb, P(m, 0, 1, w), P(m, 0, 2, w), N,', 'a->emb, P(m, 0, 2, w), P(m, 0, 1, w), N,', 'forward gain/bias params swapped'),
('LE4', LL, 'PG(m, 0, 1, g), PG(m, 0, 2, g), a->dx, a->emb,', 'PG(m, 0, 2, g), PG(m, 0, 1, g), a->dx, a->emb,', 'backward dgain/dbias swapped'),
('LE5', LL, 'PG(m, 0, 1, g), PG(m, 0, 2, g), a->dx, a->emb,', 'PG(m, 0, 1, g), PG(m, 0, 2, g), a->dx, a->layers[0].x,', 'backward uses normalized output as x'),
('LE6', LL, '\t\tdx0 = a->dtmp;\n', '', 'embedding gets the un-normalized gradient'),
('LE7', LL, '2 * R16((size_t)t * c->head_dim / 2) +\n\t       (c->stable_embedding ? R16(N * C) + 2 * R16(N) : 0) +', '2 * R16((size_t)t * c->head_dim / 2) +\n\t       (c->stable_embedding ? R16(N * C) + R16(N) : 0) +', 'rest activations under-sized by one row vector'),
('LE8', LL, '\t\ta->emb_rstd = TAKE(N);\n', '\t\ta->emb_rstd = a->emb_mean;\n', 'emb_rstd aliases emb_mean'),
# ---- layout.c (init)
('LY1', LY, 'const double a = sqrt(6.0 / (double)(p->shape[0] + p->shape[1]));', 'const double a = sqrt(6.0 / (double)(p->shape[1] + p->shape[1]));', 'Xavier fan: 2*dim'),
('LY2', LY, 'const double a = sqrt(6.0 / (double)(p->shape[0] + p->shape[1]));', 'const double a = sqrt(3.0 / (double)(p->shape[0] + p->shape[1]));', 'Xavier bound sqrt(3/..)'),
('LY3', LY, 'x[j] = (float)(a * (2.0 * rng_uniform(&r) - 1.0));', 'x[j] = (float)(a * (rng_uniform(&r) - 0.5));', 'uniform(-a/2,a/2)'),
('LY4', LY, 'm->params[2].init = ST_INIT_ZEROS;', 'm->params[1].init = ST_INIT_ZEROS;', 'gain 0 / bias 1'),
('LY5', LY, '\t\tm->params[0].init = ST_INIT_XAVIER;\n', '', 'embedding keeps normal init'),
('LY6', LY, '"model.embed_norm.bias", ST_ROLE_NORM', '"model.embed_norm.bias", ST_ROLE_EMBED', 'bias gets the embedding role'),
('LY7', LY, 'x[j] = (float)(a * (2.0 * rng_uniform(&r) - 1.0));', 'x[j] = (float)(a * (2.0 * rng_uniform(&r) - 1.0) * 0.999);', 'Xavier range 0.1% narrow'),
# ---- config.c / cmd_init.c
('CF1', CF, 'cJSON_AddStringToObject(r, "model_type", c->stable_embedding ? ST_MODEL_TYPE_STABLE : "llama");', 'cJSON_AddStringToObject(r, "model_type", "llama");', 'model_type always llama'),
('CF2', CF, '\tif (c->stable_embedding)\n\t\tcJSON_AddBoolToObject(r, "stable_embedding", 1);\n', '', 'stable_embedding key not written'),
('CF3', CF, 'ST_CHECK(!marked_stable || cfg->stable_embedding,', 'ST_CHECK(1 || cfg->stable_embedding,', 'contradictory strata_llama accepted'),
('CF4', CF, 'ST_CHECK(marked_stable || strcmp(mt->valuestring, "llama") == 0,', 'ST_CHECK(1 || strcmp(mt->valuestring, "llama") == 0,', 'any model_type accepted'),
('CF5', CF, 'cJSON_CreateString(c->stable_embedding ? ST_ARCH_STABLE\n\t\t\t\t\t\t\t\t\t  : "LlamaForCausalLM")', 'cJSON_CreateString("LlamaForCausalLM")', 'architectures always LlamaForCausalLM'),
('CF6', CF, 'ST_CHECK(cJSON_IsBool(it), "write true or false', 'ST_CHECK(1, "write true or false', 'non-boolean flag read as false'),
('CF7', CF, '\tST_CHECK(!marked_stable || cfg->stable_embedding,', '\tif (marked_stable)\n\t\tcfg->stable_embedding = 1;\n\tST_CHECK(!marked_stable || cfg->stable_embedding,', 'strata_llama forces stable (false overridden)'),
('CI1', CI, '\tif (cli_has(&a, "stable-embedding"))\n\t\tcfg.stable_embedding = stable;\n', '', 'init --stable-embedding ignored'),
# ---- optim.c accounting / state tensors
('OP1', OP, '*cur = align64(*cur + ps->state_numel * (ps->q8 ? 1 : sizeof(float)));', '*cur = align64(*cur + ps->state_numel * sizeof(float));', '8-bit codes region sized as fp32'),
('OP2', OP, 'for (int u = 0; u < m->n_units; u++)\n\t\to->total_bytes += o->unit_bytes[u];', 'for (int u = 0; u < m->n_units - 1; u++)\n\t\to->total_bytes += o->unit_bytes[u];', 'total_bytes misses the head unit'),
('OP3', OP, 'k == 0 ? "exp_avg" : "exp_avg_sq"', 'k == 0 ? "exp_avg_sq" : "exp_avg"', 'exp_avg / exp_avg_sq names swapped'),
('OP4', OP, '!is_adam(o->cfg.kind) ? "momentum_buffer"', '!is_adam(o->cfg.kind) ? "exp_avg"', 'SGD state named exp_avg'),
('OP5', OP, 'ps->q8 ? ".codes" : ""', '""', '.codes suffix dropped'),
('OP6', OP, 't->dtype = ps->q8 ? ST_DT_U8 : ST_DT_F32;', 't->dtype = ST_DT_F32;', 'codes saved as F32 dtype'),
('OP7', OP, 't->shape[0] = (int64_t)ps->n_blocks;', 't->shape[0] = (int64_t)ps->n_blocks - 1;', 'absmax shape one short'),
('OP8', OP, 't->bytes = ps->n_blocks * sizeof(float);', 't->bytes = ps->n_blocks;', 'absmax bytes counted as n_blocks'),
('OP9', OP, 'for (int k = optim_state_tensors(o, i, t); k-- > 0;)', 'for (int k = optim_state_tensors(o, i, t); k-- > 1;)', 'param state bytes skip first tensor'),
('OP10', OP, 't->bytes = ps->state_numel * (ps->q8 ? 1 : sizeof(float));', 't->bytes = ps->state_numel * sizeof(float);', 'codes tensor bytes as fp32'),
('OP11', OP, 'if (!strcmp(s, kinds[i].name)) {', 'if (!strncmp(s, kinds[i].name, strlen(kinds[i].name))) {', 'optimizer name prefix match'),
('OP12', OP, '{"sgd8bit", ST_OPT_SGD8},', '{"sgd8bit", ST_OPT_SGD},', 'sgd8bit runs fp32 SGD'),
('OP13', OP, '\t\t\t\tps->absmax_off[k] = *cur;\n\t\t\t\t*cur = align64(*cur + ps->n_blocks * sizeof(float));', '\t\t\t\tps->absmax_off[k] = *cur;\n\t\t\t\t*cur = *cur + ps->n_blocks * sizeof(float);', 'absmax region end not aligned'),
# ---- trainer.c report / skip limit
('RP1', TR, '(double)tr->opt.total_bytes / (double)m->numel,', '(double)tr->opt.total_bytes / (double)m->matmul_numel,', 'B/param over matmul params only'),
('RP2', TR, 'fmt_bytes(b3, sizeof b3, 8.0 * (double)m->numel));\n\t\tif (tr->opt.galore_weights)', 'fmt_bytes(b3, sizeof b3, 4.0 * (double)m->numel));\n\t\tif (tr->opt.galore_weights)', 'fp32 AdamW comparison 4 B/param'),
('RP3', TR, 'fmt_bytes(b2, sizeof b2, (double)tr->opt.total_bytes),\n\t\t\t    (double)tr->opt.total_bytes / (double)m->numel,', 'fmt_bytes(b2, sizeof b2, (double)tr->opt.unit_bytes[0]),\n\t\t\t    (double)tr->opt.total_bytes / (double)m->numel,', 'report prints the embed unit bytes as total'),
('RP4', TR, 'ST_CHECK(tr->skipped <= tr->o.max_skipped_steps,', 'ST_CHECK(tr->skipped < tr->o.max_skipped_steps,', 'skip limit off by one'),
# ---- options.c
('OT1', OT, '|| o->momentum > 0,', '|| o->momentum >= 0,', 'sgd8bit without momentum accepted'),
('OT2', OT, 'ST_CHECK_USAGE(strcmp(o->optimizer, "sgd8bit") != 0 || o->momentum > 0,', 'ST_CHECK_USAGE(strcmp(o->optimizer, "sgd") != 0 || o->momentum > 0,', 'momentum required for plain sgd instead'),
('OT3', OT, 'ST_CHECK_USAGE(o->quant_min_size >= 0,', 'ST_CHECK_USAGE(o->quant_min_size > 0,', '--quant-min-size 0 refused'),
('OT4', OT, '\tST_CHECK_USAGE(o->quant_min_size >= 0,\n\t\t "tensors with fewer elements keep fp32 state (default 4096); 0 quantizes all",\n\t\t "--quant-min-size must be >= 0 (got %ld)", o->quant_min_size);\n', '', 'negative --quant-min-size accepted'),
('OT5', OT, '\tST_CHECK_USAGE(o->max_skipped_steps >= 0,\n\t\t "give the non-finite steps to tolerate (default 10); 0 stops at the first",\n\t\t "--max-skipped-steps must be >= 0 (got %d)", o->max_skipped_steps);\n', '', 'negative --max-skipped-steps accepted'),
('OT6', OT, 'F(quant_block), "256",', 'F(quant_block), "128",', 'default quant block 128'),
('OT7', OT, 'F(quant_min_size), "4096",', 'F(quant_min_size), "1024",', 'default quant min size 1024'),
('OT8', OT, 'F(max_skipped_steps), "10",', 'F(max_skipped_steps), "0",', 'default max skipped 0'),
('OT9', OT, 'ST_CHECK_USAGE(o->momentum >= 0 && (float)o->momentum < 1.0f,', 'ST_CHECK_USAGE(o->momentum >= 0 && (float)o->momentum <= 1.0f,', 'momentum 1 accepted'),
('OT10', OT, '{"quant-min-size", OT_LONG, F(quant_min_size)', '{"quant-min-size", OT_DOUBLE, F(quant_min_size)', 'quant-min-size parsed as double into a long'),
# ---- checkpoint.c / safetensors load_raw
('CK1', CL, '(src->block != c->quant_block ||', '(0 ||', 'another quant_block not converted on resume'),
('CK2', CL, 'ST_CHECK(got == 1 && optim_quant_block_ok((int)v)', 'ST_CHECK(got != 0 && optim_quant_block_ok((int)v)', 'junk quant_block metadata accepted if its number is a block'),
('CK3', CL, 'ST_CHECK(got != -1, "the checkpoint is damaged; use an earlier one",', 'ST_CHECK(1, "the checkpoint is damaged; use an earlier one",', 'junk quant_min_size metadata accepted'),
('CK4', CL, '(got == 1 && v != c->quant_min_numel)', '(0)', 'another quant_min_size not converted'),
('CK5', CL, '\tif (optim_kind_is_8bit(src->kind)) {\n\t\tST_TRY(require_meta(sf, path, "quant_block"));', '\tif (1) {\n\t\tST_TRY(require_meta(sf, path, "quant_block"));', 'quant settings checked (and converted) for fp32 too'),
('CK6', CK, '"quant_block", block,\n\t\t\t      "quant_min_size", min_size,', '"quant_block", min_size,\n\t\t\t      "quant_min_size", block,', 'quant meta values swapped at save'),
('CK7', CK, '\t\t\t      "quant_min_size", min_size,\n', '', 'quant_min_size not recorded'),
('CK8', CL, 'what && e < nf; e++)', 'what && e + 1 < nf; e++)', 'last absmax not checked for sign'),
('CK9', CL, 'if (x[e] < 0) {', 'if (x[e] <= 0) {', 'zero absmax refused'),
('CK10', CL, 'if (rc == ST_OK && sf->n != n) {', 'if (rc == ST_OK && sf->n < n) {', 'extra tensors in the file accepted'),
('CK11', CH, 'return st->dtype == ST_DT_F32 ? st->bytes / sizeof(float) : 0;', 'return st->bytes / sizeof(float);', 'codes checked as floats for non-finite'),
('CK12', CL, '\t\tif (!tr->opt.unit_bytes[u])\n\t\t\tcontinue;\n\t\tchar *state', '\t\tchar *state', 'units without state acquired on load'),
('CK13', CL, 'ST_CHECK(src->kind == c->kind || ckpt_can_convert(src->kind, c->kind),', 'ST_CHECK(1,', 'optimizer kind not checked on resume'),
# ---- convert.c (state converted on resume)
('CV1', CV, 'const float *map = optim_moment_map(o, k);', 'const float *map = optim_moment_map(o, 0);', 'conversion quantizes v with the signed map'),
('CV2', CV, '\t\t\t\t\t\tlen, block, map);', '\t\t\t\t\t\tlen, from_block, map);', 'conversion requantizes at the file\'s block'),
('CV3', CV, 'return !galore && is_sgd(from) == is_sgd(to);', 'return is_sgd(from) == is_sgd(to);', 'GaLore state converted'),
('CV4', CV, 'return !galore && is_sgd(from) == is_sgd(to);', 'return !galore;', 'AdamW state converted into SGD'),
('CV5', CV, '\t\t\t\t\t\t  len, from_block, map);', '\t\t\t\t\t\t  len, 256, map);', 'conversion decodes at block 256 whatever the file'),
('CV6', CV, '\t\t\telse if (m->f32)\n\t\t\t\tmemcpy(out32, x, len * sizeof *x);', '', 'fp32 state not copied on conversion'),
('CV7', CV, 'if (m->codes && ps->q8 && from_block == block) {', 'if (0) {', '8-bit state at the same block requantized, not copied'),
('CK14', CL, 'sfx && !strcmp(sfx, ".absmax") ? "absmax"', 'sfx && !strcmp(sfx, ".codes") ? "absmax"', 'sign check on codes, not absmax'),
('SF1', SF, 'if (t->dtype != dtype) {', 'if (dtype_size(t->dtype) != dtype_size(dtype)) {', 'load_raw checks dtype size only'),
('SF2', SF, '\t\tsame = t->shape[i] == shape[i];\n\tchar got[256], want[256];\n\tif (!same ||', '\t\tsame = 1;\n\tchar got[256], want[256];\n\tif (!same ||', 'load_raw ignores dims (ndim + bytes only)'),
]

EQUIVALENT = {
    # run 1
    'Q2': 'at j = k/2 the mutant takes the linspace point as 0.1 + j step '
          'instead of 1 - (k-1-j) step; the two give bit-identical maps '
          '(compared for both kinds)',
    'Q5': 'the binary search with < instead of <= differs only when x equals an '
          'entry exactly; it then stops one entry lower, and the midpoint test '
          'returns the same code',
    'L21': 'the avx2 absmax loop stops 8 values earlier when n % 8 == 0; the '
           'scalar tail covers them with the same NaN-ignoring max',
    'V2': 'the vbmi decoder loop stops 64 values earlier when n % 64 == 0; the '
          'avx512 decoder covers the tail with the same products',
    'V4': 'the special-lane test misses only top-16-bit patterns equal to '
          '0x7f80: +-inf, which the clamped key already maps to the end codes, '
          'and NaNs whose payload lies in the low 16 bits, which cannot reach '
          'it (every NaN there comes from a product, hence quiet)',
    'A8': 'the avx512 variant taking the generic moments + update + absmax path '
          'gives the same bits as its fused avx512 path',
    'A9': 'the two-pass path at len == Q8_CHUNK computes the same absmax, and '
          'the second pass overwrites it with the one-pass value anyway',
    'G1': "SGD's first step reads the stored absmax, but only decode uses it, "
          'and decode is not called on the first step',
    'G5': "SGD's first step decodes the stored momentum, but the first-step "
          'update writes mom[i] = g without reading it',
    # run 2
    'LN17': 'nowait on the dx loop, the last one in the parallel region: the '
            "region's implicit barrier follows it",
    'OP13': "only the 64-byte padding after a unit's last absmax region goes "
            '(< 64 bytes a unit): every offset stays in bounds, the kernels load '
            'unaligned, and state bytes are specified only up to padding '
            '(test_core checks unit_bytes within [sum, sum + 64 (tensors + 1)))',
    'CK12': 'a unit without state has no S slab: acquiring it returns NULL '
            '(home tier DEVICE: not staged), its params have no state tensors '
            'to load, and the release is a no-op',
}
