/* tracec.runtime._fixed, its second part: the grouping by key, the advantages and the exact step groups, the loops
of tracec.runtime.advantage_kernels and context_group_kernels in C (why they are built so: tracec.runtime.advantages
and context_groups). Scratch memory comes from malloc, so that it can be taken without the GIL. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "_fixed.h"

static int table_bits(int64_t n_keys) {
    int bits = 4;
    while (((int64_t)1 << bits) < 2 * n_keys) { /* load under 1/2: probes stay short */
        bits++;
    }
    return bits;
}

static double scale_for(double largest) {
    return largest > HUGE_MAGNITUDE ? SHRINK : 1.0;
}

/* advantage_kernels.group_by_key: _dense_ids over all of `keys` (one stamp, so a used flag), then _bucket. */
static int64_t group_by_key(const uint64_t *keys, int64_t n, int64_t *order, int64_t *starts) {
    int64_t n_runs = 1;
    for (int64_t i = 1; i < n; i++) {
        n_runs += keys[i] != keys[i - 1];
    }
    int bits = table_bits(n_runs);
    int64_t mask = ((int64_t)1 << bits) - 1;
    uint64_t *slot_key = malloc(((size_t)1 << bits) * sizeof(uint64_t));
    uint8_t *used = calloc((size_t)1 << bits, 1);
    int64_t *slot_id = malloc(((size_t)1 << bits) * sizeof(int64_t)), *ids = malloc((size_t)(n + 1) * sizeof(int64_t));
    int64_t n_ids = -1;
    if (slot_key != NULL && used != NULL && slot_id != NULL && ids != NULL) {
        n_ids = 0;
        for (int64_t k = 0; k < n; k++) {
            uint64_t key = keys[k];
            if (k > 0 && key == keys[k - 1]) { /* keys often come in runs (the steps of one task group) */
                ids[k] = ids[k - 1];
                continue;
            }
            int64_t h = (int64_t)((key * GOLDEN) >> (64 - bits));
            while (used[h] && slot_key[h] != key) {
                h = (h + 1) & mask;
            }
            if (!used[h]) {
                used[h] = 1, slot_key[h] = key, slot_id[h] = n_ids++;
            }
            ids[k] = slot_id[h];
        }
        /* Counting sort: the items with id g go to order[starts[g]:starts[g+1]], in their order. */
        memset(starts, 0, (size_t)(n_ids + 1) * sizeof(int64_t));
        for (int64_t k = 0; k < n; k++) {
            starts[ids[k] + 1]++;
        }
        for (int64_t g = 0; g < n_ids; g++) {
            starts[g + 1] += starts[g];
        }
        for (int64_t k = 0; k < n; k++) { /* starts[g] serves as g's fill pointer, then is shifted back below */
            order[starts[ids[k]]++] = k;
        }
        for (int64_t g = n_ids; g > 0; g--) {
            starts[g] = starts[g - 1];
        }
        starts[0] = 0;
    }
    free(slot_key), free(used), free(slot_id), free(ids);
    return n_ids;
}

/* Lexicographic order on (length, then (value, minor key) step by step); a tie means identical contents. */
static int segment_less(int64_t a, int64_t b, const double *values, const int64_t *offsets, const uint64_t *minor) {
    int64_t length = offsets[a + 1] - offsets[a];
    if (length != offsets[b + 1] - offsets[b]) {
        return length < offsets[b + 1] - offsets[b];
    }
    for (int64_t k = 0; k < length; k++) {
        int64_t i = offsets[a] + k, j = offsets[b] + k;
        if (values[i] != values[j]) {
            return values[i] < values[j];
        }
        if (minor[i] != minor[j]) {
            return minor[i] < minor[j];
        }
    }
    return 0;
}

/* Sorts the segment indices `order` in place: insertion sort of short runs, then bottom-up merges. */
static void sort_segments(int64_t *order, int64_t n, const double *values, const int64_t *offsets,
                          const uint64_t *minor, int64_t *buffer) {
    for (int64_t lo = 0; lo < n; lo += SORT_RUN) {
        int64_t end = lo + SORT_RUN < n ? lo + SORT_RUN : n;
        for (int64_t k = lo + 1; k < end; k++) {
            int64_t item = order[k], j = k;
            while (j > lo && segment_less(item, order[j - 1], values, offsets, minor)) {
                order[j] = order[j - 1];
                j--;
            }
            order[j] = item;
        }
    }
    int64_t *src = order, *dst = buffer;
    for (int64_t width = SORT_RUN; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t i = lo, j = mid;
            for (int64_t k = lo; k < hi; k++) {
                if (j >= hi || (i < mid && !segment_less(src[j], src[i], values, offsets, minor))) {
                    dst[k] = src[i++];
                } else {
                    dst[k] = src[j++];
                }
            }
        }
        int64_t *swap = src;
        src = dst, dst = swap;
    }
    if (src != order) {
        memcpy(order, src, (size_t)n * sizeof(int64_t));
    }
}

/* (mean, rest, scale, factor) of values[members] * factor, summed in ascending order; scale 0 marks a singleton or
   flat group. */
static void sorted_standardize(const double *values, const int64_t *members, int64_t size, double *buffer,
                               double eps, double *mean, double *rest, double *scale, double *factor) {
    double largest = 0.0;
    for (int64_t k = 0; k < size; k++) { /* insertion sort: a task group holds a handful of episodes */
        double x = values[members[k]];
        largest = fabs(x) > largest ? fabs(x) : largest;
        int64_t j = k;
        while (j > 0 && buffer[j - 1] > x) {
            buffer[j] = buffer[j - 1];
            j--;
        }
        buffer[j] = x;
    }
    *factor = scale_for(largest);
    double total = 0.0;
    for (int64_t k = 0; k < size; k++) {
        total += buffer[k] * *factor;
    }
    *mean = total / (double)size;
    *rest = 0.0;
    for (int64_t k = 0; k < size; k++) {
        *rest += buffer[k] * *factor - *mean;
    }
    *rest /= (double)size;
    double squares = 0.0;
    for (int64_t k = 0; k < size; k++) {
        double deviation = (buffer[k] * *factor - *mean) - *rest;
        squares += deviation * deviation;
    }
    double std = sqrt(squares / (double)size);
    *scale = size >= 2 && std > ZERO_VARIANCE * *factor ? std + eps * *factor : 0.0;
}

/* The position of `item` in the ascending `sorted` (where it is). */
static int64_t position(const int64_t *sorted, int64_t n, int64_t item) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < item) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

typedef struct {
    const double *returns, *env_reward;
    const int64_t *offsets, *episodes, *group_starts;
    int64_t n_groups;
    const uint64_t *context;
    int by_context, scale_steps;
    double eps;
    double *a_e, *a_s, *a;
} Advantages;

/* advantage_kernels.trca_advantage_kernel: A_E broadcast to the steps, A_S and their sum, one task group at a
   time; -1 when its scratch memory cannot be had. */
static int trca_advantages(const Advantages *in) {
    const int64_t *offsets = in->offsets, *starts = in->group_starts;
    int64_t largest = 1, most = 1;
    for (int64_t g = 0; g < in->n_groups; g++) {
        int64_t size = 0;
        for (int64_t p = starts[g]; p < starts[g + 1]; p++) {
            size += offsets[in->episodes[p] + 1] - offsets[in->episodes[p]];
        }
        largest = size > largest ? size : largest;
        most = starts[g + 1] - starts[g] > most ? starts[g + 1] - starts[g] : most;
    }
    int bits = table_bits(largest);
    int64_t n_slots = (int64_t)1 << bits;
    uint64_t *slot_key = malloc((size_t)n_slots * sizeof(uint64_t));
    int64_t *slot_stamp = malloc((size_t)n_slots * sizeof(int64_t)), *slot_id = malloc((size_t)n_slots * 8);
    int64_t *local = malloc((size_t)largest * 8), *counts = malloc((size_t)largest * 8);
    double *gathered = malloc((size_t)largest * 8), *sums = malloc((size_t)largest * 8);
    double *scales = malloc((size_t)largest * 8), *rests = malloc((size_t)largest * 8);
    double *factors = malloc((size_t)largest * 8), *env_buffer = malloc((size_t)most * 8);
    int64_t *sort_buffer = malloc((size_t)most * 8), *ranked = malloc((size_t)most * 8);
    int64_t *canonical = malloc((size_t)most * 8);
    int status = -1;
    if (!slot_key || !slot_stamp || !slot_id || !local || !counts || !gathered || !sums || !scales || !rests
        || !factors || !env_buffer || !sort_buffer || !ranked || !canonical) {
        goto done;
    }
    for (int64_t h = 0; h < n_slots; h++) {
        slot_stamp[h] = -1;
    }
    for (int64_t g = 0; g < in->n_groups; g++) {
        const int64_t *group = in->episodes + starts[g];
        int64_t n = starts[g + 1] - starts[g];
        double e_mean, e_rest, e_scale, e_factor;
        sorted_standardize(in->env_reward, group, n, env_buffer, in->eps, &e_mean, &e_rest, &e_scale, &e_factor);
        if (!in->by_context) {
            for (int64_t p = 0; p < n; p++) {
                int64_t s = group[p];
                double ae = e_scale > 0.0 ? ((in->env_reward[s] * e_factor - e_mean) - e_rest) / e_scale : 0.0;
                for (int64_t i = offsets[s]; i < offsets[s + 1]; i++) {
                    in->a_e[i] = ae, in->a_s[i] = 0.0, in->a[i] = ae + 0.0;
                }
            }
            continue;
        }
        /* Sums in canonical order (episodes by content), memory read and written in the batch's order. */
        memcpy(ranked, group, (size_t)n * sizeof(int64_t));
        sort_segments(ranked, n, in->returns, offsets, in->context, sort_buffer);
        int64_t size = 0;
        for (int64_t q = 0; q < n; q++) {
            canonical[position(group, n, ranked[q])] = size;
            size += offsets[ranked[q] + 1] - offsets[ranked[q]];
        }
        /* Pass 1: dense context ids (the table stamped with g), the returns gathered at their canonical
           positions, each step group's largest magnitude. */
        int64_t n_ids = 0;
        for (int64_t p = 0; p < n; p++) {
            int64_t s = group[p], k = canonical[p], r = 0;
            uint64_t previous = 0;
            for (int64_t i = offsets[s]; i < offsets[s + 1]; i++) {
                uint64_t key = in->context[i];
                if (i == offsets[s] || key != previous) { /* keys often come in runs: look each run up once */
                    int64_t h = (int64_t)((key * GOLDEN) >> (64 - bits));
                    while (slot_stamp[h] == g && slot_key[h] != key) {
                        h = (h + 1) & (n_slots - 1);
                    }
                    if (slot_stamp[h] != g) {
                        slot_stamp[h] = g, slot_key[h] = key, slot_id[h] = n_ids;
                        sums[n_ids] = 0.0, rests[n_ids] = 0.0, scales[n_ids] = 0.0, factors[n_ids] = 0.0;
                        counts[n_ids] = 0;
                        n_ids++;
                    }
                    previous = key, r = slot_id[h];
                }
                local[k] = r, gathered[k] = in->returns[i];
                factors[r] = fabs(in->returns[i]) > factors[r] ? fabs(in->returns[i]) : factors[r];
                k++;
            }
        }
        /* Pass 2: means (in two parts) and squared deviations, in canonical order, each step group scaled by its
           own factor. */
        for (int64_t r = 0; r < n_ids; r++) {
            factors[r] = scale_for(factors[r]);
        }
        for (int64_t k = 0; k < size; k++) {
            gathered[k] *= factors[local[k]];
            sums[local[k]] += gathered[k];
            counts[local[k]] += 1;
        }
        for (int64_t r = 0; r < n_ids; r++) {
            sums[r] /= (double)counts[r]; /* now the mean */
        }
        for (int64_t k = 0; k < size; k++) {
            rests[local[k]] += gathered[k] - sums[local[k]];
        }
        for (int64_t r = 0; r < n_ids; r++) {
            rests[r] /= (double)counts[r];
        }
        for (int64_t k = 0; k < size; k++) {
            double deviation = (gathered[k] - sums[local[k]]) - rests[local[k]];
            scales[local[k]] += deviation * deviation;
        }
        for (int64_t r = 0; r < n_ids; r++) {
            double std = sqrt(scales[r] / (double)counts[r]);
            int flat = counts[r] < 2 || std <= ZERO_VARIANCE * factors[r];
            scales[r] = flat ? 0.0 : in->scale_steps ? std + in->eps * factors[r] : factors[r];
        }
        /* Pass 3: A_E, A_S and A in the batch's order. */
        for (int64_t p = 0; p < n; p++) {
            int64_t s = group[p], k = canonical[p];
            double ae = e_scale > 0.0 ? ((in->env_reward[s] * e_factor - e_mean) - e_rest) / e_scale : 0.0;
            for (int64_t i = offsets[s]; i < offsets[s + 1]; i++, k++) {
                int64_t r = local[k];
                double step = scales[r] > 0.0 ? ((gathered[k] - sums[r]) - rests[r]) / scales[r] : 0.0;
                in->a_e[i] = ae, in->a_s[i] = step, in->a[i] = ae + step;
            }
        }
    }
    status = 0;
done:
    free(slot_key), free(slot_stamp), free(slot_id), free(local), free(counts), free(gathered), free(sums);
    free(scales), free(rests), free(factors), free(env_buffer), free(sort_buffer), free(ranked), free(canonical);
    return status;
}

/* The context tuple of every step: per scalar component its words and known flags, per set its CSR columns. */
typedef struct {
    const int64_t **words, **set_values, **set_offsets;
    const uint8_t **word_known, **set_known;
    int64_t n_words, n_sets;
} Tuples;

/* context_group_kernels._same_tuple: whether steps i and s have equal context tuples. */
static int same_tuple(int64_t i, int64_t s, const Tuples *t) {
    for (int64_t c = 0; c < t->n_words; c++) {
        const uint8_t *known = t->word_known[c];
        if ((known[i] != 0) != (known[s] != 0) || (known[i] != 0 && t->words[c][i] != t->words[c][s])) {
            return 0;
        }
    }
    for (int64_t c = 0; c < t->n_sets; c++) {
        const uint8_t *known = t->set_known[c];
        const int64_t *offsets = t->set_offsets[c], *values = t->set_values[c];
        if ((known[i] != 0) != (known[s] != 0)) {
            return 0;
        }
        if (known[i] != 0) {
            int64_t length = offsets[i + 1] - offsets[i];
            if (length != offsets[s + 1] - offsets[s]) {
                return 0;
            }
            for (int64_t k = 0; k < length; k++) {
                if (values[offsets[i] + k] != values[offsets[s] + k]) {
                    return 0;
                }
            }
        }
    }
    return 1;
}

/* context_group_kernels.exact_keys: without `resolve`, mark each task group where two different tuples share a
   hash; with it, write exact keys of the marked groups into `out`. -1 when its table cannot be had. */
static int exact_keys(const uint64_t *keys, const int64_t *offsets, const int64_t *episodes,
                      const int64_t *group_starts, int64_t n_groups, int resolve, uint64_t *out, const Tuples *t,
                      uint8_t *collided) {
    int64_t largest = 1;
    for (int64_t g = 0; g < n_groups; g++) {
        int64_t size = 0;
        for (int64_t p = group_starts[g]; p < group_starts[g + 1]; p++) {
            size += offsets[episodes[p] + 1] - offsets[episodes[p]];
        }
        largest = size > largest ? size : largest;
    }
    int bits = table_bits(largest);
    int64_t mask = ((int64_t)1 << bits) - 1;
    uint64_t *slot_key = malloc(((size_t)mask + 1) * sizeof(uint64_t));
    int64_t *slot_stamp = malloc(((size_t)mask + 1) * 8), *slot_step = malloc(((size_t)mask + 1) * 8);
    if (slot_key == NULL || slot_stamp == NULL || slot_step == NULL) {
        free(slot_key), free(slot_stamp), free(slot_step);
        return -1;
    }
    for (int64_t h = 0; h <= mask; h++) {
        slot_stamp[h] = -1;
    }
    for (int64_t g = 0; g < n_groups; g++) {
        if (resolve && !collided[g]) {
            continue;
        }
        for (int64_t p = group_starts[g]; p < group_starts[g + 1]; p++) {
            int64_t e = episodes[p];
            for (int64_t i = offsets[e]; i < offsets[e + 1]; i++) {
                uint64_t key = keys[i];
                if (!resolve && i > offsets[e] && key == keys[i - 1] && same_tuple(i, i - 1, t)) {
                    continue; /* a run of one tuple: the previous step was checked already */
                }
                for (;;) {
                    int64_t h = (int64_t)((key * GOLDEN) >> (64 - bits));
                    while (slot_stamp[h] == g && slot_key[h] != key) {
                        h = (h + 1) & mask;
                    }
                    if (slot_stamp[h] != g) {
                        slot_stamp[h] = g, slot_key[h] = key, slot_step[h] = i;
                        break;
                    }
                    if (same_tuple(i, slot_step[h], t)) {
                        break;
                    }
                    if (!resolve) {
                        collided[g] = 1;
                        break;
                    }
                    key += 1; /* another tuple holds this key: try the next one */
                }
                if (resolve) {
                    out[i] = key;
                }
            }
        }
    }
    free(slot_key), free(slot_stamp), free(slot_step);
    return 0;
}

PyObject *tracec_group_by_key(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *keys_o, *order_o, *starts_o;
    if (!PyArg_ParseTuple(args, "OOO:group_by_key", &keys_o, &order_o, &starts_o)) {
        return NULL;
    }
    HELD(held, 3);
    Array keys, order, starts;
    PyObject *result = NULL;
    if (take(&held, keys_o, 'Q', 0, &keys) == 0 && take(&held, order_o, 'q', WRITABLE, &order) == 0
        && take(&held, starts_o, 'q', WRITABLE, &starts) == 0) {
        int64_t n_ids;
        Py_BEGIN_ALLOW_THREADS
        n_ids = group_by_key((const uint64_t *)keys.data, keys.n, (int64_t *)order.data, (int64_t *)starts.data);
        Py_END_ALLOW_THREADS
        result = n_ids < 0 ? PyErr_NoMemory() : PyLong_FromLongLong(n_ids);
    }
    release(&held);
    return result;
}

PyObject *tracec_trca_advantage_kernel(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *returns_o, *offsets_o, *env_o, *episodes_o, *starts_o, *context_o, *a_e_o, *a_s_o, *a_o;
    Advantages in;
    if (!PyArg_ParseTuple(args, "OOOOOOppdOOO:trca_advantage_kernel", &returns_o, &offsets_o, &env_o, &episodes_o,
                          &starts_o, &context_o, &in.by_context, &in.scale_steps, &in.eps, &a_e_o, &a_s_o, &a_o)) {
        return NULL;
    }
    HELD(held, 9);
    Array returns, offsets, env, episodes, starts, context, a_e, a_s, a;
    PyObject *result = NULL;
    if (take(&held, returns_o, 'd', 0, &returns) == 0 && take(&held, offsets_o, 'q', 0, &offsets) == 0
        && take(&held, env_o, 'd', 0, &env) == 0 && take(&held, episodes_o, 'q', 0, &episodes) == 0
        && take(&held, starts_o, 'q', 0, &starts) == 0 && take(&held, context_o, 'Q', 0, &context) == 0
        && take(&held, a_e_o, 'd', WRITABLE, &a_e) == 0 && take(&held, a_s_o, 'd', WRITABLE, &a_s) == 0
        && take(&held, a_o, 'd', WRITABLE, &a) == 0) {
        in.returns = (const double *)returns.data, in.env_reward = (const double *)env.data;
        in.offsets = (const int64_t *)offsets.data, in.episodes = (const int64_t *)episodes.data;
        in.group_starts = (const int64_t *)starts.data, in.n_groups = starts.n - 1;
        in.context = (const uint64_t *)context.data;
        in.a_e = (double *)a_e.data, in.a_s = (double *)a_s.data, in.a = (double *)a.data;
        int status;
        Py_BEGIN_ALLOW_THREADS
        status = trca_advantages(&in);
        Py_END_ALLOW_THREADS
        result = status < 0 ? PyErr_NoMemory() : Py_NewRef(Py_None);
    }
    release(&held);
    return result;
}

/* The arrays of a tuple of them, into views (held) and their data pointers. */
static int take_all(Held *held, PyObject *tuple, char dtype, const void **data) {
    for (Py_ssize_t c = 0; c < PyTuple_GET_SIZE(tuple); c++) {
        Array array;
        if (take(held, PyTuple_GET_ITEM(tuple, c), dtype, 0, &array) < 0) {
            return -1;
        }
        data[c] = array.data;
    }
    return 0;
}

PyObject *tracec_exact_keys(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *keys_o, *offsets_o, *episodes_o, *starts_o, *out_o, *collided_o;
    PyObject *words_o, *word_known_o, *set_values_o, *set_offsets_o, *set_known_o;
    int resolve;
    long long n_words, n_sets;
    if (!PyArg_ParseTuple(args, "OOOOpOO!O!LO!O!O!LO:exact_keys", &keys_o, &offsets_o, &episodes_o, &starts_o,
                          &resolve, &out_o, &PyTuple_Type, &words_o, &PyTuple_Type, &word_known_o, &n_words,
                          &PyTuple_Type, &set_values_o, &PyTuple_Type, &set_offsets_o, &PyTuple_Type, &set_known_o,
                          &n_sets, &collided_o)) {
        return NULL;
    }
    if (n_words < 0 || n_words > PyTuple_GET_SIZE(words_o) || n_words > PyTuple_GET_SIZE(word_known_o) || n_sets < 0
        || n_sets > PyTuple_GET_SIZE(set_values_o) || n_sets > PyTuple_GET_SIZE(set_offsets_o)
        || n_sets > PyTuple_GET_SIZE(set_known_o)) {
        PyErr_SetString(PyExc_ValueError, "exact_keys: n_words or n_sets exceeds its tuples");
        return NULL;
    }
    Tuples t = {.n_words = n_words, .n_sets = n_sets};
    Py_ssize_t n_arrays = 6 + PyTuple_GET_SIZE(words_o) + PyTuple_GET_SIZE(word_known_o)
                          + PyTuple_GET_SIZE(set_values_o) + PyTuple_GET_SIZE(set_offsets_o)
                          + PyTuple_GET_SIZE(set_known_o);
    Held held = {PyMem_Calloc((size_t)n_arrays, sizeof(Py_buffer)), 0, n_arrays};
    const void **pointers = PyMem_Calloc((size_t)n_arrays, sizeof(void *));
    PyObject *result = NULL;
    if (held.views == NULL || pointers == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    t.words = (const int64_t **)pointers;
    t.word_known = (const uint8_t **)(t.words + PyTuple_GET_SIZE(words_o));
    t.set_values = (const int64_t **)(t.word_known + PyTuple_GET_SIZE(word_known_o));
    t.set_offsets = (const int64_t **)(t.set_values + PyTuple_GET_SIZE(set_values_o));
    t.set_known = (const uint8_t **)(t.set_offsets + PyTuple_GET_SIZE(set_offsets_o));
    Array keys, offsets, episodes, starts, out, collided;
    if (take_all(&held, words_o, 'q', (const void **)t.words) == 0
        && take_all(&held, word_known_o, 'B', (const void **)t.word_known) == 0
        && take_all(&held, set_values_o, 'q', (const void **)t.set_values) == 0
        && take_all(&held, set_offsets_o, 'q', (const void **)t.set_offsets) == 0
        && take_all(&held, set_known_o, 'B', (const void **)t.set_known) == 0
        && take(&held, keys_o, 'Q', 0, &keys) == 0 && take(&held, offsets_o, 'q', 0, &offsets) == 0
        && take(&held, episodes_o, 'q', 0, &episodes) == 0 && take(&held, starts_o, 'q', 0, &starts) == 0
        && take(&held, out_o, 'Q', resolve ? WRITABLE : 0, &out) == 0
        && take(&held, collided_o, 'B', WRITABLE, &collided) == 0) {
        int status;
        Py_BEGIN_ALLOW_THREADS
        status = exact_keys((const uint64_t *)keys.data, (const int64_t *)offsets.data,
                            (const int64_t *)episodes.data, (const int64_t *)starts.data, starts.n - 1, resolve,
                            (uint64_t *)out.data, &t, (uint8_t *)collided.data);
        Py_END_ALLOW_THREADS
        result = status < 0 ? PyErr_NoMemory() : Py_NewRef(Py_None);
    }
done:
    release(&held);
    PyMem_Free(held.views);
    PyMem_Free(pointers);
    return result;
}
