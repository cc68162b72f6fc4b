# The CPU attention kernels' ISA clones (the GPT step's speed on the CPU).
# The program lives in tests/attention/.

# runtime/cpu/cpu_attn.c once per clone target (its KL_ATTN_CLONES replaced
# by one target, the entry points renamed), with the library's own
# compile options: the FMA clones (x86-64-v4, x86-64-v3) give the same
# bytes as each other and as the library's dispatch; the baseline clone
# agrees within 1e-5 and differs (it has no FMA).
set(gptfast2_attn_variants
    "v4\;__attribute__((target(\"arch=x86-64-v4\")))"
    "v3\;__attribute__((target(\"arch=x86-64-v3\")))"
    "base\;")
add_executable(attn_isa_check attention/attn_isa_check.c)
foreach(variant IN LISTS gptfast2_attn_variants)
  list(GET variant 0 suffix)
  list(GET variant 1 clones)
  add_library(gptfast2_attn_${suffix} OBJECT ${PROJECT_SOURCE_DIR}/runtime/cpu/cpu_attn.c)
  target_include_directories(gptfast2_attn_${suffix} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/runtime/cpu)
  target_compile_options(gptfast2_attn_${suffix} PRIVATE ${KILN_CPU_ATTN_OPTIONS} ${OpenMP_C_FLAGS})
  target_compile_definitions(gptfast2_attn_${suffix} PRIVATE "KL_ATTN_CLONES=${clones}"
    kl_cpu_attention=kl_cpu_attention_${suffix} kl_cpu_attention_supported=kl_cpu_attention_supported_${suffix})
  target_sources(attn_isa_check PRIVATE $<TARGET_OBJECTS:gptfast2_attn_${suffix}>)
endforeach()
target_link_libraries(attn_isa_check PRIVATE kiln m)
add_test(NAME attn.cpu.isa COMMAND attn_isa_check)
