# Generates, from a list of a real library's exported functions, (1) weak stubs that report
# "not simulated" and return the library's not-supported code, and (2) a version script exporting
# exactly that list under the real library's version node (or none, for unversioned libraries).
# Implemented functions are strong definitions and win over the weak stubs at link time.
function(p2psim_stubs SYMS OUT_C OUT_MAP NODE CODE CODE_NAME)
  file(STRINGS "${SYMS}" names)
  set(c "/* generated from ${SYMS}; do not edit */\nint p2psim_unsupported(const char*, int, const char*);\n")
  set(globals "")
  foreach(n IN LISTS names)
    string(APPEND c "__attribute__((weak, visibility(\"default\"))) int ${n}(void) { return p2psim_unsupported(\"${n}\", ${CODE}, \"${CODE_NAME}\"); }\n")
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
