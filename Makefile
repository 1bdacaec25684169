# pybridge build: Futhark programs (futhark/*.fut, and the test programs tests/reference/*.fut) ->
# shared libraries + manifests for every backend in FUTHARK_BACKENDS; CUDA kernels -> cubin/PTX +
# host-launcher libraries. Missing tools skip their part with one line saying what, why and how to
# get them; `make futhark` / `make cuda` alone fail instead.

# The Futhark compiler: $FUTHARK, else `futhark` on PATH, else the project-local install that
# scripts/install-futhark.sh makes in .tools/ (Debian's package, no system-wide change). Its
# messages go to .tools/install-futhark.log; a failure is summarised in one line below.
FUTHARK_LOG := .tools/install-futhark.log
ifeq ($(origin FUTHARK),undefined)
FUTHARK := $(shell mkdir -p .tools && scripts/install-futhark.sh 2>$(FUTHARK_LOG))
FUTHARK_WHY = $(shell grep '^install-futhark:' $(FUTHARK_LOG) 2>/dev/null | grep -v 'releases/\|unpack it' | tail -n1 | cut -c18-)
endif
# Backends built by `make`; `make FUTHARK_BACKEND=cuda` (or any one backend) builds only that one.
FUTHARK_BACKENDS ?= c multicore
ifneq ($(origin FUTHARK_BACKEND),undefined)
FUTHARK_BACKENDS := $(FUTHARK_BACKEND)
endif
NVCC            ?= nvcc
CUDA_ARCH       ?= sm_90
BUILD           ?= build
CC              ?= cc
PYTHON          ?= python3
# /usr/local/bin/nvcc may be a wrapper, so prefer the toolkit's usual home when it exists.
CUDA_HOME       ?= $(or $(wildcard /usr/local/cuda),$(patsubst %/bin/,%,$(dir $(shell command -v $(NVCC) 2>/dev/null))))

BUILD := $(patsubst %/,%,$(BUILD))

# ---------------------------------------------------------------- Futhark
# build/futhark/<backend>/ from futhark/*.fut (shipped by `pip install .`); build/reference/<backend>/
# from tests/reference/*.fut (test data the API tests run on, never shipped).
FUT_PROGS := $(patsubst futhark/%.fut,%,$(wildcard futhark/*.fut))
REF_PROGS := $(patsubst tests/reference/%.fut,%,$(wildcard tests/reference/*.fut))
FUT_LIBS  := $(foreach b,$(FUTHARK_BACKENDS),$(FUT_PROGS:%=$(BUILD)/futhark/$(b)/lib%.so) $(REF_PROGS:%=$(BUILD)/reference/$(b)/lib%.so))

# Link flags the generated C needs, per backend (cuda: measured with Futhark 0.25.34).
FUT_LDLIBS_c         := -lm
FUT_LDLIBS_multicore := -lm -lpthread
FUT_LDLIBS_cuda      := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcuda -lcudart -lnvrtc -lm
FUT_LDLIBS_opencl    := -lOpenCL -lm
FUT_LDLIBS_hip       := -lamdhip64 -lhiprtc -lm
FUT_CFLAGS_cuda      := -I$(CUDA_HOME)/include

HAVE_FUTHARK := $(if $(FUTHARK),$(shell command -v $(FUTHARK) >/dev/null 2>&1 && echo yes))
FUTHARK_MISSING = skipped futhark/*.fut and tests/reference/*.fut ($(FUTHARK_BACKENDS)): no Futhark compiler \
$(if $(FUTHARK),'$(FUTHARK)' )($(or $(FUTHARK_WHY),not found)). \
Get the official release from https://futhark-lang.org/releases/ and put its bin/ on PATH, or run make FUTHARK=/path/to/futhark.

# ---------------------------------------------------------------- CUDA
CU_SRCS  := $(wildcard kernels_cu/*.cu)
CU_MODS  := $(patsubst kernels_cu/%.cu,%,$(CU_SRCS))
CU_DIR   := $(BUILD)/cuda
CU_HDRS  := $(wildcard kernels_cu/*.cuh)
CU_SM    := $(subst sm_,,$(CUDA_ARCH))
# Machine code for CUDA_ARCH plus PTX of the same level, which the driver JIT-compiles on newer GPUs.
CU_GENCODE := -gencode arch=compute_$(CU_SM),code=sm_$(CU_SM) -gencode arch=compute_$(CU_SM),code=compute_$(CU_SM)
NVCCFLAGS ?= -O3 -std=c++17 -lineinfo
CU_OUTPUTS := $(foreach m,$(CU_MODS),$(CU_DIR)/$(m).cubin $(CU_DIR)/$(m).ptx $(CU_DIR)/lib$(m).so $(CU_DIR)/lib$(m).launchers.json)

HAVE_NVCC := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo yes)
NVCC_MISSING := skipped kernels_cu/*.cu: CUDA compiler '$(NVCC)' not found. \
Install the CUDA toolkit (https://developer.nvidia.com/cuda-downloads) and put its bin/ on PATH, or run make NVCC=/path/to/nvcc.

.PHONY: all futhark cuda test clean info
all: futhark-if-available cuda-if-available

# ---- Futhark rules
.PHONY: futhark-if-available cuda-if-available
ifeq ($(HAVE_FUTHARK),yes)
futhark-if-available: futhark
futhark: $(FUT_LIBS)
else
futhark-if-available:
	@echo "make: $(FUTHARK_MISSING)"
futhark:
	@echo "make: $(FUTHARK_MISSING)" >&2; exit 1
endif

# `futhark <backend> --library -o DIR/prog` writes prog.c, prog.h and prog.json; one set of rules
# per (backend, source folder, output folder); a new csource.py fix regenerates (and re-hardens) the C. With FUTHARK=/bin/true the carried generated C is
# compiled as it is (the GPU machine has nvcc but no Futhark).
define FUT_RULES
$(BUILD)/$(3)/$(1)/%.c $(BUILD)/$(3)/$(1)/%.h $(BUILD)/$(3)/$(1)/%.json &: $(2)/%.fut pybridge/futhark/csource.py
	@mkdir -p $(BUILD)/$(3)/$(1)
	$$(FUTHARK) $(1) --library -o $(BUILD)/$(3)/$(1)/$$* $$<
	$(if $(filter cuda,$(1)),scripts/futhark_cuda13_compat.sh $$(CUDA_HOME)/include $(BUILD)/$(3)/$(1)/$$*.c)
	$$(PYTHON) -I pybridge/futhark/csource.py $(BUILD)/$(3)/$(1)/$$*.c
	cp $$< $(BUILD)/$(3)/$(1)/$$*.fut

$(BUILD)/$(3)/$(1)/lib%.so: $(BUILD)/$(3)/$(1)/%.c $(BUILD)/$(3)/$(1)/%.h
	$$(CC) -O3 -fPIC -shared $$(FUT_CFLAGS_$(1)) -o $$@ $$< $$(FUT_LDLIBS_$(1))

.PRECIOUS: $(BUILD)/$(3)/$(1)/%.c $(BUILD)/$(3)/$(1)/%.h $(BUILD)/$(3)/$(1)/%.json $(BUILD)/$(3)/$(1)/%.fut
endef
$(foreach b,$(FUTHARK_BACKENDS),$(eval $(call FUT_RULES,$(b),futhark,futhark))$(eval $(call FUT_RULES,$(b),tests/reference,reference)))

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

# The host launchers' declarations, read from the .cu's own lines (their /*[n]*/ sizes), for
# pybridge.cuda.load_launchers. Standard-library Python: runs before `pip install`; -I keeps
# pybridge/cuda off sys.path.
$(CU_DIR)/lib%.launchers.json: kernels_cu/%.cu pybridge/cuda/launcher_sidecar.py
	@mkdir -p $(CU_DIR)
	$(PYTHON) -I pybridge/cuda/launcher_sidecar.py $< $@

# ---- Tests and housekeeping
test: all
	$(PYTHON) -m pytest -rs tests

info:
	@echo "futhark: $(if $(HAVE_FUTHARK),$(shell command -v $(FUTHARK)),missing)  backends: $(FUTHARK_BACKENDS)"
	@echo "nvcc:    $(if $(HAVE_NVCC),$(shell command -v $(NVCC)),missing)  arch: $(CUDA_ARCH)"
	@echo "build:   $(BUILD)"

clean:
	rm -rf $(BUILD)
