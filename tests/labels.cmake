# ctest labels, given centrally by test name, so a new test needs nothing:
#  - the name's first part (its prefix: tp.mlp -> tp, attn.cpu.isa -> attn);
#  - the feature it belongs to (tests/README.md's table), from the rules in
#    KILN_FEATURE_RULES below: `ctest -L ranks` runs tp.*, zero.*,
#    overlap.*, comm.*, hosts.*, ranks.* and data.ranks; a test may be in two
#    features (attn.cuda.nvrtc: attention and cuda);
#  - `quick`: every test but those named in KILN_SLOW_TESTS, so
#    `ctest -L quick` is an inner loop of about 3 minutes on 2 cores that
#    still touches every feature; `slow` marks the rest.
# A directory calls kiln_label_tests() once its tests are registered
# (tests/CMakeLists.txt at its end; tests/cuda and tests/fuzz deferred).

# FEATURE=REGEX: a test whose name matches REGEX gets the label FEATURE.
# (ctest -L takes a regular expression too: no feature's name is part
# of another label's.)
set(KILN_FEATURE_RULES
  "language=^(roundtrip|ir|pool|language|sumto)\\."
  "fusion=^fusion\\."
  "memplan=^(memplan|plan)\\.|^perf\\.batch_auto$"
  "precision=^(precision|gemmpath|fp16)\\.|^perf\\.bf16_gemm$|^unit\\.(precision|halves|dnnl|gemm_reuse)$"
  "attention=^(attn|cudaattn)\\."
  "ranks=^(ranks|tp|zero|overlap|comm|pipeline|hosts)\\.|^data\\.ranks$"
  "data=^(data|pack|sizes)\\.|^predict\\.shard_labels$"
  "ckpt=^(ckpt|outputs|outfile)(\\.|$)|^predict\\.(outputs|fields)$"
  "gpt=^(gpt|sampler|tokens|generate)\\.|^unit\\.tokens$"
  "observe=^(observe|doctor)\\.|^perf\\.(guard|counters)|^unit\\.(doctor|observe)$|^train\\.throughput$"
  "cuda=^(cuda|cudalt|cudaattn|gpu|simgpu)\\.|\\.cuda\\.|\\.graph_replay$"
  "train=^(train|e2e)\\."
  "grad=^harden\\.grad\\."
  "reference=^harden\\.(reference|march)\\."
  "build=^(build|layering|docs|tests|harness|cache|ops|cli)\\.|^layering$|^unit\\.jit$|^train\\.runtime_cc$"
)

# Measured on 2 cores: the tests that take the
# longest (with a cold kernel cache: compiling is most of a fresh clone's
# time); each feature keeps quick tests (kiln_label_tests checks that).
set(KILN_SLOW_TESTS
  attn\\.cuda\\.emulate
  attn\\.cuda\\.nvrtc
  attn\\.train
  ckpt\\.eval
  ckpt\\.format
  ckpt\\.fp16_skipped_save
  ckpt\\.periodic
  ckpt\\.precision
  ckpt\\.pydeps
  ckpt\\.safetensors
  comm\\.accum
  cuda\\.emulate\\.fashion_cnn
  cuda\\.emulate\\.gpt
  cuda\\.emulate\\.grad
  cuda\\.emulate\\.key_bias
  cuda\\.emulate\\.mlp
  cuda\\.emulate\\.nan_inf
  cuda\\.emulate\\.split_reduce
  cuda\\.nvrtc\\.fashion_cnn
  cuda\\.nvrtc\\.gpt
  cuda\\.nvrtc\\.gpt2_small
  cuda\\.nvrtc\\.grad
  cuda\\.nvrtc\\.mlp
  cuda\\.nvrtc\\.nan_inf
  cuda\\.occupancy
  cudaattn\\.emulate
  cudaattn\\.nvrtc
  cudalt\\.cuda\\.emulate
  cudalt\\.cuda\\.nvrtc
  data\\.bad_inputs_and_resume
  data\\.bad_shards
  data\\.input_probes
  data\\.ranks
  data\\.shards_train
  data\\.webdataset
  fusion\\.cuda\\.emulate
  fusion\\.cuda\\.nvrtc
  fusion\\.depth
  gemmpath\\.bf16_onednn
  gemmpath\\.bf16_kiln
  gemmpath\\.bf16_openblas
  gemmpath\\.f16_avx512
  gemmpath\\.f16_widened
  gemmpath\\.fp32_onednn
  gemmpath\\.fp32_openblas
  gpt\\.generate
  gpt\\.gpt2_small
  gpt\\.train
  harden\\.reference\\.gpt_batch2
  language\\.cuda\\.emulate
  language\\.cuda\\.nvrtc
  memplan\\.batch_probe
  memplan\\.budget
  memplan\\.e2e
  observe\\.tensorboard
  outputs
  overlap\\.same
  pack\\.roundtrip_and_errors
  perf\\.batch_auto
  perf\\.guard\\.catches
  pipeline\\.zero
  precision\\.e2e
  ranks\\.cnn
  ranks\\.mlp
  ranks\\.precision
  ranks\\.resume
  reference\\.examples\\.fashion_cnn\\.fp16
  reference\\.examples\\.gpt
  reference\\.examples\\.gpt2_small\\.tiny
  sampler\\.draws
  simgpu\\.batch_auto
  simgpu\\.cnn\\.bf16
  simgpu\\.cnn\\.fp32
  simgpu\\.gpt\\.bf16
  simgpu\\.gpt\\.fp16
  simgpu\\.gpt\\.fp32
  simgpu\\.ranks\\.tp_dp
  sumto\\.one_pass
  tp\\.clip
  tp\\.cnn
  tp\\.fp16
  tp\\.mlp
  tp\\.pad
  tp\\.resume
  tp\\.resume_padded
  tp\\.syncbn
  tp\\.zero
  train\\.throughput
  unit\\.halves
  zero\\.zero1\\.cnn
  zero\\.zero1\\.mlp
  zero\\.zero1\\.precision
  zero\\.zero1\\.resume
  zero\\.zero2\\.cnn
  zero\\.zero2\\.mlp
  zero\\.zero2\\.precision
  zero\\.zero2\\.resume
  zero\\.zero3\\.cnn
  zero\\.zero3\\.mlp
  zero\\.zero3\\.precision
  zero\\.zero3\\.resume
  zero\\.zero3\\.runtime
)

# N=REGEX: a test whose name matches REGEX (the first rule that matches)
# runs N processes at once, mpirun's ranks (ctest's PROCESSORS): `ctest
# -j2` then runs a many-rank test alone instead of beside another test
# (ctest counts a test of more processors than -j as -j), where ranks
# waiting in a collective for a rank that has no core spin and slow both.
set(KILN_PROCESSORS_RULES
  # A stopped or killed rank's job: the others wait (yielding) for the
  # collective timeout or the launcher, so these mostly sleep and run
  # beside another test.
  "1=^(ranks\\.timeout|ranks\\.kill|pipeline\\.kill|simgpu\\.ranks\\.timeout)$"
  "3=^(overlap\\.|data\\.ranks$|simgpu\\.ranks\\.np3$)"
  "2=^(gemmpath\\.|comm\\.|hosts\\.|ckpt\\.preempt$|simgpu\\.ranks\\.)"
  "4=^(ranks|tp|zero|pipeline)\\."
)

function(kiln_label_tests)
  get_property(tests DIRECTORY PROPERTY TESTS)
  list(JOIN KILN_SLOW_TESTS "|" slow)
  set(features)
  set(quick_features)
  foreach(t ${tests})
    string(REGEX REPLACE "\\..*$" "" prefix "${t}")
    set(own ${prefix})
    foreach(rule ${KILN_FEATURE_RULES})
      string(REGEX REPLACE "=.*$" "" feature "${rule}")
      string(REGEX REPLACE "^[^=]*=" "" regex "${rule}")
      if(t MATCHES "${regex}")
        list(APPEND own ${feature})
      endif()
    endforeach()
    list(REMOVE_DUPLICATES own)
    if(t MATCHES "^(${slow})$")
      set(speed slow)
    else()
      set(speed quick)
      list(APPEND quick_features ${own})
    endif()
    list(APPEND features ${own})
    get_test_property(${t} LABELS labels)
    if(NOT labels)
      set(labels)
    endif()
    list(APPEND labels ${own} ${speed})
    set_tests_properties(${t} PROPERTIES LABELS "${labels}")
    # A fresh clone has no timings of its own (Testing/Temporary/CTestCostData.txt),
    # so ctest would start tests in the order they are declared and leave
    # the long ones last, one slot idle at the end: slow tests start first.
    if(speed STREQUAL "slow")
      set_tests_properties(${t} PROPERTIES COST 100)
    endif()
    get_test_property(${t} PROCESSORS procs)
    if(NOT procs)
      foreach(rule ${KILN_PROCESSORS_RULES})
        string(REGEX REPLACE "=.*$" "" n "${rule}")
        string(REGEX REPLACE "^[^=]*=" "" regex "${rule}")
        if(t MATCHES "${regex}")
          set_tests_properties(${t} PROPERTIES PROCESSORS ${n})
          break()
        endif()
      endforeach()
    endif()
  endforeach()
  list(REMOVE_DUPLICATES features)
  foreach(f ${features})
    if(NOT f IN_LIST quick_features)
      message(WARNING "tests/labels.cmake: no quick test for label '${f}': take one of its tests out of KILN_SLOW_TESTS")
    endif()
  endforeach()
endfunction()
