# Debian packages of what `cmake --install` installs, one a component (packaging/install.cmake,
# samples/cli): libpulseinfer0 (the versioned library; its dependencies, abseil and PCRE2, found
# by dpkg-shlibdeps), libpulseinfer-dev (header, pkg-config file, CMake package and the
# unversioned link) and pulseinfer (the command). scripts/package builds them for the x86-64
# baseline (PULSEINFER_NATIVE off) and tests them installed. Included from the top CMakeLists.txt.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME libpulseinfer)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "libpulseinfer developers <libpulseinfer@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "LLM decoding with a KV cache kept mostly in CPU memory and recalled sparsely")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime development tools)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libpulseinfer${PULSEINFER_ABI_VERSION})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION "libpulseinfer, its shared library (C ABI version ${PULSEINFER_ABI_VERSION})")

set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME libpulseinfer-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS
  "libpulseinfer${PULSEINFER_ABI_VERSION} (= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_DEVELOPMENT_DESCRIPTION
  "libpulseinfer, what building against it needs: pulseinfer.h, pkg-config and CMake files")

# The command is C and links only the library and libc.
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME pulseinfer)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION science)
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS
  "libpulseinfer${PULSEINFER_ABI_VERSION} (= ${PROJECT_VERSION}), libc6")
set(CPACK_DEBIAN_TOOLS_DESCRIPTION "libpulseinfer's command: generate from a model")

include(CPack)
