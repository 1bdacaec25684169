# pybridge build: Futhark programs (futhark/*.fut, and the test programs tests/reference/*.fut) ->
# shared libraries + manifests for every backend in FUTHARK_BACKENDS; CUDA kernels -> cubin/PTX +
# host-launcher libraries. Missing tools skip their part with one line saying what, why and how to
# get them; `make futhark` / `make cuda` alone fail instead. Each step prints one progress line,
# `[3/24] futhark c futhark/saxpy.fut` (n: the library's place among all N this run may build, so
# a partial rebuild skips numbers); `make V=1` prints the commands themselves.

# The Futhark compiler: $FUTHARK, else `futhark` on PATH, else this checkout's .tools/bin/futhark,
# else the per-user install that scripts/install-futhark.sh makes ($PYBRIDGE_TOOLS, else
# ~/.local/share/pybridge/tools: Debian's package, no system-wide change; the same folder as
# `pybridge install-futhark`, so an installed pybridge finds it too). It is looked up (and, the first
# time, downloaded: the script says what and how big first) only when a target needs it: FUTHARK
# below expands once, on first use, so `make clean`, `make cuda` and `make info` never download.
# The script's messages go to the terminal and to .tools/install-futhark.log.
FUTHARK_LOG := .tools/install-futhark.log
FUTHARK_ORIGIN := $(origin FUTHARK)
ifeq ($(FUTHARK_ORIGIN),undefined)
FUTHARK = $(eval FUTHARK := $$(shell mkdir -p .tools && scripts/install-futhark.sh --log $(FUTHARK_LOG)))$(FUTHARK)
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
# Build-time scripts (csource.py, launcher_sidecar.py) are standard-library only and run isolated:
# -I keeps their own folder off sys.path (pybridge/futhark/types.py would shadow the stdlib's types)
# and ignores PYTHON* variables and the user's site-packages, with any python3 (3.10-3.13).
PYTHON_SCRIPT   := $(PYTHON) -I
# /usr/local/bin/nvcc may be a wrapper, so prefer the toolkit's usual home when it exists.
CUDA_HOME       ?= $(or $(wildcard /usr/local/cuda),$(patsubst %/bin/,%,$(dir $(shell command -v $(NVCC) 2>/dev/null))))

BUILD := $(patsubst %/,%,$(BUILD))

# Progress: Q hides a command (V=1 shows them all); NUM_<output> is its place in its list.
V ?= 0
Q := $(if $(filter 1,$(V)),,@)
QUIET_OUT := $(if $(filter 1,$(V)),,>/dev/null)
number = $(eval _seen :=)$(foreach f,$(1),$(eval _seen += x)$(eval NUM_$(f) := $(words $(_seen))))

# ---------------------------------------------------------------- Futhark
# build/futhark/<backend>/ from futhark/*.fut (shipped by `pip install .`); build/reference/<backend>/
# from tests/reference/*.fut (test data the API tests run on, never shipped).
FUT_PROGS := $(patsubst futhark/%.fut,%,$(wildcard futhark/*.fut))
REF_PROGS := $(patsubst tests/reference/%.fut,%,$(wildcard tests/reference/*.fut))
FUT_LIBS  := $(foreach b,$(FUTHARK_BACKENDS),$(FUT_PROGS:%=$(BUILD)/futhark/$(b)/lib%.so) $(REF_PROGS:%=$(BUILD)/reference/$(b)/lib%.so))
$(call number,$(FUT_LIBS))
FUT_STEP = [$(NUM_$(1))/$(words $(FUT_LIBS))]

# Link flags the generated C needs, per backend (cuda: measured with Futhark 0.25.34).
FUT_LDLIBS_c         := -lm
FUT_LDLIBS_multicore := -lm -lpthread
FUT_LDLIBS_cuda      := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcuda -lcudart -lnvrtc -lm
FUT_LDLIBS_opencl    := -lOpenCL -lm
FUT_LDLIBS_hip       := -lamdhip64 -lhiprtc -lm
FUT_CFLAGS_cuda      := -I$(CUDA_HOME)/include
# A library's C flags (pybridge/futhark/build.py's LIB_CFLAGS, which says why); without
# -fno-semantic-interposition where the compiler does not know it (asked once, when first needed).
LIB_CFLAGS = $(eval LIB_CFLAGS := -O3 -fPIC $$(shell $(CC) -fno-semantic-interposition -Werror -x c -c -o /dev/null /dev/null 2>/dev/null && echo -fno-semantic-interposition))$(LIB_CFLAGS)

HAVE_FUTHARK = $(if $(FUTHARK),$(shell command -v $(FUTHARK) >/dev/null 2>&1 && echo yes))
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
# No -lineinfo: nvcc writes the build folder's absolute path into the line tables of the cubin, the
# PTX and the library, and `pip install .` ships them (no build machine's path belongs in a wheel).
# To profile with source lines: make cuda NVCCFLAGS='-O3 -std=c++17 -lineinfo'.
NVCCFLAGS ?= -O3 -std=c++17
CU_OUTPUTS := $(foreach m,$(CU_MODS),$(CU_DIR)/$(m).cubin $(CU_DIR)/$(m).ptx $(CU_DIR)/lib$(m).so $(CU_DIR)/lib$(m).launchers.json)
$(call number,$(CU_OUTPUTS))
CU_STEP = @echo "[$(NUM_$@)/$(words $(CU_OUTPUTS))] $(1) $< -> $@"

HAVE_NVCC := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo yes)
NVCC_MISSING := skipped kernels_cu/*.cu: CUDA compiler '$(NVCC)' not found. \
Install the CUDA toolkit (https://developer.nvidia.com/cuda-downloads) and put its bin/ on PATH, or run make NVCC=/path/to/nvcc.

.PHONY: all futhark cuda test clean info
all: futhark-if-available cuda-if-available

# ---- Futhark rules
# futhark-if-available / futhark obtain the compiler (expanding FUTHARK) only when they run, then
# build the libraries in a sub-make that is handed the compiler's path.
.PHONY: futhark-if-available cuda-if-available futhark-libs
futhark-if-available:
	@$(if $(HAVE_FUTHARK),$(MAKE) --no-print-directory futhark-libs FUTHARK='$(FUTHARK)',echo "make: $(FUTHARK_MISSING)")
futhark:
	@$(if $(HAVE_FUTHARK),$(MAKE) --no-print-directory futhark-libs FUTHARK='$(FUTHARK)',echo "make: $(FUTHARK_MISSING)" >&2; exit 1)
# The compiler that built the libraries, recorded for this checkout's own pybridge (pybridge.toolchain
# reads it only when imported from this checkout; setup.py never ships it: a build machine's path).
futhark-libs: $(FUT_LIBS)
	@p=$$(command -v '$(FUTHARK)') && "$$p" --version 2>/dev/null | grep -q '^Futhark' \
	  && echo "$$(cd "$$(dirname "$$p")" && pwd)/$$(basename "$$p")" > $(BUILD)/futhark-compiler.txt \
	  || rm -f $(BUILD)/futhark-compiler.txt

# `futhark <backend> --library -o DIR/prog` writes prog.c, prog.h and prog.json. They are written and
# hardened (csource.py) in a temporary folder and moved into place only when every step succeeded,
# so a failed or interrupted build never leaves unhardened C that a later `make` would link; the .c
# goes last. One set of rules per (backend, source folder, output folder); a new csource.py
# regenerates (and re-hardens) the C. With FUTHARK=/bin/true the carried generated C goes through the
# same steps (idempotent) and is compiled (the GPU machine has nvcc but no Futhark).
define FUT_RULES
$(BUILD)/$(3)/$(1)/%.c $(BUILD)/$(3)/$(1)/%.h $(BUILD)/$(3)/$(1)/%.json &: $(2)/%.fut pybridge/futhark/csource.py
	@rm -rf $(BUILD)/$(3)/$(1)/.tmp-$$* && mkdir -p $(BUILD)/$(3)/$(1)/.tmp-$$*
	@echo "$$(call FUT_STEP,$(BUILD)/$(3)/$(1)/lib$$*.so) futhark $(1) $$<"
	$$(Q)$$(or $$(FUTHARK),$$(error no Futhark compiler: $$(FUTHARK_MISSING))) $(1) --library -o $(BUILD)/$(3)/$(1)/.tmp-$$*/$$* $$<
	@[ -f $(BUILD)/$(3)/$(1)/.tmp-$$*/$$*.c ] || cp $(BUILD)/$(3)/$(1)/$$*.c $(BUILD)/$(3)/$(1)/$$*.h $(BUILD)/$(3)/$(1)/$$*.json $(BUILD)/$(3)/$(1)/.tmp-$$*/ \
	  || { echo "make: '$$(FUTHARK)' wrote no $$*.c and there is no carried $(BUILD)/$(3)/$(1)/$$*.c" >&2; exit 1; }
	$(if $(filter cuda,$(1)),$$(Q)scripts/futhark_cuda13_compat.sh $$(CUDA_HOME)/include $(BUILD)/$(3)/$(1)/.tmp-$$*/$$*.c)
	$$(Q)$$(PYTHON_SCRIPT) pybridge/futhark/csource.py $(BUILD)/$(3)/$(1)/.tmp-$$*/$$*.c $$(QUIET_OUT)
	$$(Q)cp $$< $(BUILD)/$(3)/$(1)/$$*.fut
	@cd $(BUILD)/$(3)/$(1) && mv -f .tmp-$$*/$$*.h .tmp-$$*/$$*.json . && mv -f .tmp-$$*/$$*.c . && rmdir .tmp-$$*

$(BUILD)/$(3)/$(1)/lib%.so: $(BUILD)/$(3)/$(1)/%.c $(BUILD)/$(3)/$(1)/%.h
	@echo "$$(call FUT_STEP,$$@) $$(CC) $(1) $$@"
	$$(Q)$$(CC) $$(LIB_CFLAGS) -shared $$(FUT_CFLAGS_$(1)) -o $$@ $$< $$(FUT_LDLIBS_$(1))

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
	$(call CU_STEP,nvcc cubin)
	$(Q)$(NVCC) $(NVCCFLAGS) -cubin -arch=$(CUDA_ARCH) -o $@ $<

$(CU_DIR)/%.ptx: kernels_cu/%.cu $(CU_HDRS)
	@mkdir -p $(CU_DIR)
	$(call CU_STEP,nvcc ptx)
	$(Q)$(NVCC) $(NVCCFLAGS) -ptx -arch=compute_$(CU_SM) -o $@ $<

$(CU_DIR)/lib%.so: kernels_cu/%.cu $(CU_HDRS)
	@mkdir -p $(CU_DIR)
	$(call CU_STEP,nvcc launchers)
	$(Q)$(NVCC) $(NVCCFLAGS) $(CU_GENCODE) -shared -Xcompiler -fPIC -o $@ $<

# The host launchers' declarations, read from the .cu's own lines (their /*[n]*/ sizes), for
# pybridge.cuda.load_launchers. Standard-library Python: runs before `pip install`; -I keeps
# pybridge/cuda off sys.path.
$(CU_DIR)/lib%.launchers.json: kernels_cu/%.cu pybridge/cuda/launcher_sidecar.py
	@mkdir -p $(CU_DIR)
	$(call CU_STEP,declarations)
	$(Q)$(PYTHON_SCRIPT) pybridge/cuda/launcher_sidecar.py $< $@

# ---- Tests and housekeeping
test: all
	$(PYTHON) -m pytest -rs tests

info:
	@echo "futhark: $(or $(if $(filter undefined,$(FUTHARK_ORIGIN)),$(shell scripts/install-futhark.sh --find-only 2>/dev/null),$(shell command -v $(FUTHARK))),not found (make downloads it when a target needs it))  backends: $(FUTHARK_BACKENDS)"
	@echo "nvcc:    $(if $(HAVE_NVCC),$(shell command -v $(NVCC)),missing)  arch: $(CUDA_ARCH)"
	@echo "build:   $(BUILD)"

clean:
	rm -rf $(BUILD)
