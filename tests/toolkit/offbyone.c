// A deliberately wrong Futhark library for pybridge.testing's own tests.
//
// It implements the part of the documented Futhark C API (docs/c-api.rst) that offbyone.json
// names: configuration, context, errors, the []f32 array type, and two entry points with
// Futhark's calling convention for `entry saxpy [n] (a: f32) (xs: [n]f32) (ys: [n]f32) : [n]f32`:
//
//   saxpy     the bug: its loop stops one element early, so out[n-1] stays 0 (calloc)
//   saxpy_ok  the correct loop, so the toolkit can be shown to pass a correct target
//
// Build: cc -shared -fPIC -O1 -ffp-contract=off -o liboffbyone.so offbyone.c
// Also exports pybridge_fixture_live_values() like the conformance fixtures, so the lifecycle
// machine's live-value invariant can be exercised on it.

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUTHARK_SUCCESS 0
#define FUTHARK_PROGRAM_ERROR 2
#define FUTHARK_OUT_OF_MEMORY 3

static int live_values = 0;
int pybridge_fixture_live_values(void) { return live_values; }

// ---------------------------------------------------------------- configuration and context
struct futhark_context_config {
  int debugging, profiling, logging;
};

struct futhark_context {
  char *error;  // malloc'd; handed to the caller by futhark_context_get_error
};

struct futhark_context_config *futhark_context_config_new(void) {
  return calloc(1, sizeof(struct futhark_context_config));
}
void futhark_context_config_free(struct futhark_context_config *cfg) { free(cfg); }
void futhark_context_config_set_debugging(struct futhark_context_config *cfg, int flag) { cfg->debugging = flag; }
void futhark_context_config_set_profiling(struct futhark_context_config *cfg, int flag) { cfg->profiling = flag; }
void futhark_context_config_set_logging(struct futhark_context_config *cfg, int flag) { cfg->logging = flag; }
int futhark_context_config_set_tuning_param(struct futhark_context_config *cfg, const char *name, size_t value) {
  (void)cfg; (void)name; (void)value;
  return 1;  // this program has no tuning parameters
}
int futhark_get_tuning_param_count(void) { return 0; }
const char *futhark_get_tuning_param_name(int i) { (void)i; return NULL; }
const char *futhark_get_tuning_param_class(int i) { (void)i; return NULL; }
void futhark_context_config_set_cache_file(struct futhark_context_config *cfg, const char *f) { (void)cfg; (void)f; }

struct futhark_context *futhark_context_new(struct futhark_context_config *cfg) {
  (void)cfg;
  return calloc(1, sizeof(struct futhark_context));
}
void futhark_context_free(struct futhark_context *ctx) {
  free(ctx->error);
  free(ctx);
}
int futhark_context_sync(struct futhark_context *ctx) { (void)ctx; return 0; }
char *futhark_context_get_error(struct futhark_context *ctx) {
  char *e = ctx->error;
  ctx->error = NULL;
  return e;
}
void futhark_context_pause_profiling(struct futhark_context *ctx) { (void)ctx; }
void futhark_context_unpause_profiling(struct futhark_context *ctx) { (void)ctx; }
char *futhark_context_report(struct futhark_context *ctx) {
  (void)ctx;
  return strdup("{\"memory\": {}, \"events\": []}");
}
int futhark_context_clear_caches(struct futhark_context *ctx) { (void)ctx; return 0; }

static void set_error(struct futhark_context *ctx, const char *msg) {
  free(ctx->error);
  ctx->error = strdup(msg);
}

// ---------------------------------------------------------------- []f32
struct futhark_f32_1d {
  float *data;
  int64_t shape[1];
  int owned;  // 0 for new_raw: the caller owns the memory
};

static struct futhark_f32_1d *alloc_f32_1d(int64_t n) {
  struct futhark_f32_1d *a = malloc(sizeof *a);
  if (a == NULL) return NULL;
  a->data = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
  if (a->data == NULL) { free(a); return NULL; }
  a->shape[0] = n;
  a->owned = 1;
  live_values++;
  return a;
}

struct futhark_f32_1d *futhark_new_f32_1d(struct futhark_context *ctx, const float *data, int64_t dim0) {
  struct futhark_f32_1d *a = alloc_f32_1d(dim0);
  if (a == NULL) { set_error(ctx, "out of memory"); return NULL; }
  if (dim0 > 0) memcpy(a->data, data, (size_t)dim0 * sizeof(float));
  return a;
}
struct futhark_f32_1d *futhark_new_raw_f32_1d(struct futhark_context *ctx, unsigned char *data, int64_t dim0) {
  struct futhark_f32_1d *a = malloc(sizeof *a);
  if (a == NULL) { set_error(ctx, "out of memory"); return NULL; }
  a->data = (float *)data;
  a->shape[0] = dim0;
  a->owned = 0;
  live_values++;
  return a;
}
int futhark_free_f32_1d(struct futhark_context *ctx, struct futhark_f32_1d *arr) {
  (void)ctx;
  if (arr->owned) free(arr->data);
  free(arr);
  live_values--;
  return 0;
}
int futhark_values_f32_1d(struct futhark_context *ctx, struct futhark_f32_1d *arr, float *data) {
  (void)ctx;
  if (arr->shape[0] > 0) memcpy(data, arr->data, (size_t)arr->shape[0] * sizeof(float));
  return 0;
}
unsigned char *futhark_values_raw_f32_1d(struct futhark_context *ctx, struct futhark_f32_1d *arr) {
  (void)ctx;
  return (unsigned char *)arr->data;
}
const int64_t *futhark_shape_f32_1d(struct futhark_context *ctx, struct futhark_f32_1d *arr) {
  (void)ctx;
  return arr->shape;
}
int futhark_index_f32_1d(struct futhark_context *ctx, float *out, struct futhark_f32_1d *arr, int64_t i0) {
  if (i0 < 0 || i0 >= arr->shape[0]) {
    set_error(ctx, "Index out of bounds.\n");
    return 1;
  }
  *out = arr->data[i0];
  return 0;
}

// ---------------------------------------------------------------- entry points
static int saxpy_impl(struct futhark_context *ctx, struct futhark_f32_1d **out0, float a,
                      const struct futhark_f32_1d *xs, const struct futhark_f32_1d *ys, int64_t skip) {
  int64_t n = xs->shape[0];
  if (ys->shape[0] != n) {
    char msg[160];
    snprintf(msg, sizeof msg, "Error: value of size [%lld] cannot match shape of type `[%lld]f32`.\n",
             (long long)ys->shape[0], (long long)n);
    set_error(ctx, msg);
    return FUTHARK_PROGRAM_ERROR;
  }
  struct futhark_f32_1d *out = alloc_f32_1d(n);
  if (out == NULL) { set_error(ctx, "out of memory"); return FUTHARK_OUT_OF_MEMORY; }
  for (int64_t i = 0; i < n - skip; i++) out->data[i] = a * xs->data[i] + ys->data[i];
  *out0 = out;
  return FUTHARK_SUCCESS;
}

int futhark_entry_saxpy(struct futhark_context *ctx, struct futhark_f32_1d **out0, const float in0,
                        const struct futhark_f32_1d *in1, const struct futhark_f32_1d *in2) {
  return saxpy_impl(ctx, out0, in0, in1, in2, 1);  // BUG (on purpose): the last element is skipped
}

int futhark_entry_saxpy_ok(struct futhark_context *ctx, struct futhark_f32_1d **out0, const float in0,
                           const struct futhark_f32_1d *in1, const struct futhark_f32_1d *in2) {
  return saxpy_impl(ctx, out0, in0, in1, in2, 0);
}
