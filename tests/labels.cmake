# ctest labels, given centrally by test name, so a new test needs nothing:
#  - one label per feature: the name's first part with trailing digits
#    dropped (tp2.x -> tp, prec3.x -> prec, zero.zero3.x -> zero), a few
#    names merged below (precision.e2e -> prec, gpu*/cuda* -> their own);
#  - `quick`: every test but those named in KILN_SLOW_TESTS, so
#    `ctest -L quick` is an inner loop of about 3 minutes on 2 cores that
#    still touches every feature; `slow` marks the rest.
# A directory calls kiln_label_tests() once its tests are registered
# (tests/CMakeLists.txt at its end; tests/cuda and tests/fuzz deferred).

# Measured on 2 cores (docs/notes/suite.md): the tests that take the
# longest; each feature keeps quick tests (kiln_label_tests checks that).
set(KILN_SLOW_TESTS
  attn\\.cuda\\.emulate
  attn\\.cuda\\.nvrtc
  attn\\.train
  ckpt\\.eval
  ckpt\\.format
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
  cuda\\.nvrtc
  cuda\\.nvrtc\\.grad
  cuda\\.nvrtc\\.nan_inf
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
  fusion\\.depth
  gemmpath\\.bf16_onednn
  gemmpath\\.bf16_openblas
  gemmpath\\.f16_avx512
  gemmpath\\.f16_widened
  gemmpath\\.fp32_onednn
  gemmpath\\.fp32_openblas
  gpt\\.generate
  gpt\\.train
  gpu\\.kit
  gpukern\\.batch_probe
  gpuocc\\.check
  harden\\.reference\\.gpt_batch2
  memplan\\.budget
  memplan\\.e2e
  observe\\.tensorboard
  overlap\\.same
  pack\\.roundtrip_and_errors
  perf\\.batch_auto
  perf\\.guard\\.catches
  precision\\.e2e
  ranks\\.cnn
  ranks\\.mlp
  ranks\\.precision
  ranks\\.resume
  reference\\.examples\\.fashion_cnn\\.fp16
  reference\\.examples\\.gpt
  sampler\\.draws
  sumto\\.one_pass
  tidy\\.fp16_skipped_save
  tp\\.mlp
  tp\\.resume
  tp\\.syncbn
  tp2\\.clip
  tp2\\.cnn
  tp2\\.fp16
  tp2\\.pad
  tp2\\.resume
  tp2\\.zero
  train\\.throughput
  unit\\.halves
  xformer\\.cuda\\.emulate
  xformer\\.cuda\\.nvrtc
  xfuse\\.cuda\\.emulate
  xfuse\\.cuda\\.nvrtc
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

function(kiln_label_tests)
  get_property(tests DIRECTORY PROPERTY TESTS)
  list(JOIN KILN_SLOW_TESTS "|" slow)
  set(features)
  set(quick_features)
  foreach(t ${tests})
    string(REGEX REPLACE "\\..*$" "" feature "${t}")
    string(REGEX REPLACE "[0-9]+$" "" feature "${feature}")
    if(feature STREQUAL "precision")
      set(feature prec)
    endif()
    if(t MATCHES "^(${slow})$")
      set(speed slow)
    else()
      set(speed quick)
      list(APPEND quick_features ${feature})
    endif()
    list(APPEND features ${feature})
    get_test_property(${t} LABELS labels)
    if(NOT labels)
      set(labels)
    endif()
    list(APPEND labels ${feature} ${speed})
    set_tests_properties(${t} PROPERTIES LABELS "${labels}")
  endforeach()
  list(REMOVE_DUPLICATES features)
  foreach(f ${features})
    if(NOT f IN_LIST quick_features)
      message(WARNING "tests/labels.cmake: no quick test for feature '${f}': take one of its tests out of KILN_SLOW_TESTS")
    endif()
  endforeach()
endfunction()
