# Install rules of the shared library: lib/libpulseinfer.so*, include/pulseinfer/pulseinfer.h,
# a pkg-config file (pulseinfer.pc) and a CMake package (find_package(pulseinfer) gives the
# target pulseinfer::pulseinfer). Included from capi/CMakeLists.txt. Components, one a Debian
# package (packaging/cpack.cmake): runtime (the versioned library), development (the rest).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(PULSEINFER_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/pulseinfer)
set(PULSEINFER_PACKAGING_OUT ${PROJECT_BINARY_DIR}/packaging)

install(TARGETS pulseinfer EXPORT pulseinferTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT development
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/capi/include/pulseinfer/pulseinfer.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pulseinfer COMPONENT development)
install(EXPORT pulseinferTargets NAMESPACE pulseinfer::
  DESTINATION ${PULSEINFER_CMAKE_INSTALL_DIR} COMPONENT development)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/pulseinferConfig.cmake.in
  ${PULSEINFER_PACKAGING_OUT}/pulseinferConfig.cmake
  INSTALL_DESTINATION ${PULSEINFER_CMAKE_INSTALL_DIR})
# One SONAME per major version: the ABI only grows within it.
write_basic_package_version_file(${PULSEINFER_PACKAGING_OUT}/pulseinferConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PULSEINFER_PACKAGING_OUT}/pulseinferConfig.cmake
  ${PULSEINFER_PACKAGING_OUT}/pulseinferConfigVersion.cmake
  DESTINATION ${PULSEINFER_CMAKE_INSTALL_DIR} COMPONENT development)

file(RELATIVE_PATH PULSEINFER_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" PULSEINFER_PC_TO_PREFIX "${PULSEINFER_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/pulseinfer.pc.in ${PULSEINFER_PACKAGING_OUT}/pulseinfer.pc
  @ONLY)
install(FILES ${PULSEINFER_PACKAGING_OUT}/pulseinfer.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT development)
