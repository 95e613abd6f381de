# The API reference: `cmake --build <build> --target docs` writes the C API's pages
# (Doxygen over the header, docs/api/Doxyfile.in) to <build>/docs/api/html; the Python
# package's pages come from its docstrings (pydoc, in the packages.python test). Where
# Doxygen is not installed there is no docs target.
find_program(OCTATTN_DOXYGEN doxygen)
if(OCTATTN_DOXYGEN)
  set(OCTATTN_API_DOCS ${PROJECT_BINARY_DIR}/docs/api)
  configure_file(${PROJECT_SOURCE_DIR}/docs/api/Doxyfile.in ${OCTATTN_API_DOCS}/Doxyfile @ONLY)
  add_custom_target(docs COMMAND ${OCTATTN_DOXYGEN} ${OCTATTN_API_DOCS}/Doxyfile
                    WORKING_DIRECTORY ${OCTATTN_API_DOCS} VERBATIM)
endif()
if(OCTATTN_DOXYGEN AND OCTATTN_BUILD_TESTS)
  add_test(NAME docs.api COMMAND ${OCTATTN_DOXYGEN} ${OCTATTN_API_DOCS}/Doxyfile
           WORKING_DIRECTORY ${OCTATTN_API_DOCS})
endif()
