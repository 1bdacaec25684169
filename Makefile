# pybridge build: Futhark programs -> shared libraries + manifests, CUDA kernels -> cubin/PTX +
# host-launcher libraries, conformance fixtures -> shared libraries. Missing tools skip their part
# with one line saying what, why and how to get them; `make futhark` / `make cuda` alone fail instead.

# The Futhark compiler: $FUTHARK, else `futhark` on PATH, else the project-local install that
# scripts/install-futhark.sh makes in .tools/ (Debian's package, no system-wide change).
ifeq ($(origin FUTHARK),undefined)
FUTHARK := $(shell scripts/install-futhark.sh)
endif
FUTHARK_BACKEND ?= c
NVCC            ?= nvcc
CUDA_ARCH       ?= sm_90
BUILD           ?= build
CC              ?= cc
PYTHON          ?= python3
# /usr/local/bin/nvcc may be a wrapper, so prefer the toolkit's usual home when it exists.
CUDA_HOME       ?= $(or $(wildcard /usr/local/cuda),$(patsubst %/bin/,%,$(dir $(shell command -v $(NVCC) 2>/dev/null))))

BUILD := $(patsubst %/,%,$(BUILD))

# ---------------------------------------------------------------- Futhark
FUT_SRCS  := $(wildcard futhark/*.fut)
FUT_PROGS := $(patsubst futhark/%.fut,%,$(FUT_SRCS))
FUT_DIR   := $(BUILD)/futhark/$(FUTHARK_BACKEND)
FUT_LIBS  := $(FUT_PROGS:%=$(FUT_DIR)/lib%.so)
# The reference programs the conformance fixtures imitate, built by the real compiler when present,
# so the same API tests run on real output and on the fixtures.
REF_DIR   := $(BUILD)/reference/$(FUTHARK_BACKEND)
REF_LIBS  := $(REF_DIR)/libtypes.so $(REF_DIR)/libprobe.so

# Link flags the generated C needs, per backend (cuda: measured with Futhark 0.25.34).
FUT_LDLIBS_c         := -lm
FUT_LDLIBS_multicore := -lm -lpthread
FUT_LDLIBS_cuda      := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcuda -lcudart -lnvrtc -lm
FUT_LDLIBS_opencl    := -lOpenCL -lm
FUT_LDLIBS_hip       := -lamdhip64 -lhiprtc -lm
FUT_CFLAGS_cuda      := -I$(CUDA_HOME)/include
FUT_LDLIBS := $(FUT_LDLIBS_$(FUTHARK_BACKEND))

HAVE_FUTHARK := $(if $(FUTHARK),$(shell command -v $(FUTHARK) >/dev/null 2>&1 && echo yes))
FUTHARK_MISSING := skipped futhark/*.fut ($(FUTHARK_BACKEND) backend): Futhark compiler '$(FUTHARK)' not found. \
Get the official release tarball from https://futhark-lang.org/releases/ (futhark-<version>-linux-x86_64.tar.xz), \
unpack it and put its bin/ on PATH, or run make FUTHARK=/path/to/futhark.

# ---------------------------------------------------------------- CUDA
CU_SRCS  := $(wildcard kernels_cu/*.cu)
CU_MODS  := $(patsubst kernels_cu/%.cu,%,$(CU_SRCS))
CU_DIR   := $(BUILD)/cuda
CU_HDRS  := $(wildcard kernels_cu/*.cuh)
CU_SM    := $(subst sm_,,$(CUDA_ARCH))
# Machine code for CUDA_ARCH plus PTX of the same level, which the driver JIT-compiles on newer GPUs.
CU_GENCODE := -gencode arch=compute_$(CU_SM),code=sm_$(CU_SM) -gencode arch=compute_$(CU_SM),code=compute_$(CU_SM)
NVCCFLAGS ?= -O3 -std=c++17 -lineinfo
CU_OUTPUTS := $(foreach m,$(CU_MODS),$(CU_DIR)/$(m).cubin $(CU_DIR)/$(m).ptx $(CU_DIR)/lib$(m).so)

HAVE_NVCC := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo yes)
NVCC_MISSING := skipped kernels_cu/*.cu: CUDA compiler '$(NVCC)' not found. \
Install the CUDA toolkit (https://developer.nvidia.com/cuda-downloads) and put its bin/ on PATH, or run make NVCC=/path/to/nvcc.

.PHONY: all futhark cuda fixtures test clean info
all: futhark-if-available cuda-if-available fixtures

# ---- Futhark rules
.PHONY: futhark-if-available cuda-if-available
ifeq ($(HAVE_FUTHARK),yes)
futhark-if-available: futhark
futhark: $(FUT_LIBS) $(REF_LIBS)
else
futhark-if-available:
	@echo "make: $(FUTHARK_MISSING)"
futhark:
	@echo "make: $(FUTHARK_MISSING)" >&2; exit 1
endif

# `futhark <backend> --library -o DIR/prog` writes prog.c, prog.h and prog.json.
$(FUT_DIR)/%.c $(FUT_DIR)/%.h $(FUT_DIR)/%.json &: futhark/%.fut
	@mkdir -p $(FUT_DIR)
	$(FUTHARK) $(FUTHARK_BACKEND) --library -o $(FUT_DIR)/$* $<
	$(if $(filter cuda,$(FUTHARK_BACKEND)),scripts/futhark_cuda13_compat.sh $(CUDA_HOME)/include $(FUT_DIR)/$*.c)

$(FUT_DIR)/lib%.so: $(FUT_DIR)/%.c $(FUT_DIR)/%.h
	$(CC) -O3 -fPIC -shared $(FUT_CFLAGS_$(FUTHARK_BACKEND)) -o $@ $< $(FUT_LDLIBS)

.PRECIOUS: $(FUT_DIR)/%.c $(FUT_DIR)/%.h $(FUT_DIR)/%.json

$(REF_DIR)/%.c $(REF_DIR)/%.h $(REF_DIR)/%.json &: tests/reference/%.fut
	@mkdir -p $(REF_DIR)
	$(FUTHARK) $(FUTHARK_BACKEND) --library -o $(REF_DIR)/$* $<
	$(if $(filter cuda,$(FUTHARK_BACKEND)),scripts/futhark_cuda13_compat.sh $(CUDA_HOME)/include $(REF_DIR)/$*.c)

$(REF_DIR)/lib%.so: $(REF_DIR)/%.c $(REF_DIR)/%.h
	$(CC) -O3 -fPIC -shared $(FUT_CFLAGS_$(FUTHARK_BACKEND)) -o $@ $< $(FUT_LDLIBS)

.PRECIOUS: $(REF_DIR)/%.c $(REF_DIR)/%.h $(REF_DIR)/%.json

# ---- CUDA rules
ifeq ($(HAVE_NVCC),yes)
cuda-if-available: cuda
cuda: $(CU_OUTPUTS)
else
cuda-if-available:
	@echo "make: $(NVCC_MISSING)"
cuda:
	@echo "make: $(NVCC_MISSING)" >&2; exit 1
endif

$(CU_DIR)/%.cubin: kernels_cu/%.cu $(CU_HDRS)
	@mkdir -p $(CU_DIR)
	$(NVCC) $(NVCCFLAGS) -cubin -arch=$(CUDA_ARCH) -o $@ $<

$(CU_DIR)/%.ptx: kernels_cu/%.cu $(CU_HDRS)
	@mkdir -p $(CU_DIR)
	$(NVCC) $(NVCCFLAGS) -ptx -arch=compute_$(CU_SM) -o $@ $<

$(CU_DIR)/lib%.so: kernels_cu/%.cu $(CU_HDRS)
	@mkdir -p $(CU_DIR)
	$(NVCC) $(NVCCFLAGS) $(CU_GENCODE) -shared -Xcompiler -fPIC -o $@ $<

# ---- Conformance fixtures (C libraries implementing the Futhark C API; see tests/fixtures/)
include tests/fixtures/fixtures.mk

# ---- Tests and housekeeping
test: all
	$(PYTHON) -m pytest -rs tests

info:
	@echo "futhark: $(if $(HAVE_FUTHARK),$(shell command -v $(FUTHARK)),missing)  backend: $(FUTHARK_BACKEND)"
	@echo "nvcc:    $(if $(HAVE_NVCC),$(shell command -v $(NVCC)),missing)  arch: $(CUDA_ARCH)"
	@echo "build:   $(BUILD)"

clean:
	rm -rf $(BUILD)
