# Generates, from a list of a real library's exported functions, (1) weak stubs that report
# "not simulated" and return the library's not-supported code, and (2) a version script exporting
# exactly that list under the real library's version node (or none, for unversioned libraries).
# Implemented functions are strong definitions and win over the weak stubs at link time.
# P2PSIM_EXTRA_EXPORTS (a list, set by the caller) adds the sim's own hidden hooks to the map.
function(p2psim_stubs SYMS OUT_C OUT_MAP NODE CODE CODE_NAME)
  file(STRINGS "${SYMS}" names)
  set(c "/* generated from ${SYMS}; do not edit */\nint p2psim_unsupported(const char*, int, const char*);\n")
  set(globals "")
  foreach(n IN LISTS names)
    string(APPEND c "__attribute__((weak, visibility(\"default\"))) int ${n}(void) { return p2psim_unsupported(\"${n}\", ${CODE}, \"${CODE_NAME}\"); }\n")
    string(APPEND globals "    ${n};\n")
  endforeach()
  foreach(n IN LISTS P2PSIM_EXTRA_EXPORTS)
    string(APPEND globals "    ${n};\n")
  endforeach()
  file(WRITE "${OUT_C}.tmp" "${c}")
  file(COPY_FILE "${OUT_C}.tmp" "${OUT_C}" ONLY_IF_DIFFERENT)
  if(NODE)
    set(map "${NODE} {\n  global:\n${globals}  local: *;\n};\n")
  else()
    set(map "{\n  global:\n${globals}  local: *;\n};\n")
  endif()
  file(WRITE "${OUT_MAP}.tmp" "${map}")
  file(COPY_FILE "${OUT_MAP}.tmp" "${OUT_MAP}" ONLY_IF_DIFFERENT)
endfunction()

# NCCL's flavour (its NCCL_API macro under PROFAPI): every `ncclX` that has a `pncclX` twin is a WEAK
# export and `pncclX` a strong GLOBAL one at the same address. The functions the sim implements are
# read from SOURCE (each is defined there with the NCCL_API macro) and left out of the stubs, so the
# implementation never races a stub at link time; every other name becomes a "not simulated" stub
# pair. Names without a `pncclX` twin (ncclResetDebugInitInternal) are plain strong stubs.
# The version script has no node: the real libnccl.so.2 is unversioned.
function(p2psim_nccl_stubs SYMS SOURCE OUT_C OUT_MAP CODE CODE_NAME)
  file(STRINGS "${SYMS}" names)
  file(STRINGS "${SOURCE}" api_lines REGEX "^NCCL_API\\(")
  set(implemented "")
  foreach(line IN LISTS api_lines)
    string(REGEX REPLACE "^NCCL_API\\([^,]+, *([A-Za-z0-9_]+).*$" "\\1" n "${line}")
    if(NOT n IN_LIST names)
      message(FATAL_ERROR "${SOURCE}: ${n} is not exported by the real libnccl.so.2 (${SYMS})")
    endif()
    list(APPEND implemented ${n})
  endforeach()
  set(c "/* generated from ${SYMS} and ${SOURCE}; do not edit */\nint p2psim_unsupported(const char*, int, const char*);\n")
  set(globals "")
  foreach(n IN LISTS names)
    string(APPEND globals "    ${n};\n")
    if(n MATCHES "^pnccl" OR n IN_LIST implemented)
      continue()
    endif()
    set(call "return p2psim_unsupported(\"${n}\", ${CODE}, \"${CODE_NAME}\");")
    if("p${n}" IN_LIST names)
      string(APPEND c "__attribute__((visibility(\"default\"))) int p${n}(void) { ${call} }\n"
                      "__attribute__((weak, alias(\"p${n}\"), visibility(\"default\"))) int ${n}(void);\n")
    else()
      string(APPEND c "__attribute__((visibility(\"default\"))) int ${n}(void) { ${call} }\n")
    endif()
  endforeach()
  file(WRITE "${OUT_C}.tmp" "${c}")
  file(COPY_FILE "${OUT_C}.tmp" "${OUT_C}" ONLY_IF_DIFFERENT)
  file(WRITE "${OUT_MAP}.tmp" "{\n  global:\n${globals}  local: *;\n};\n")
  file(COPY_FILE "${OUT_MAP}.tmp" "${OUT_MAP}" ONLY_IF_DIFFERENT)
endfunction()
