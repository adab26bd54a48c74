# Debian packages of rpclb, one per install component (CMakeLists.txt):
#
#   librpclb0     runtime  librpclb.so.0 and the plugins (<libdir>/rpclb/plugins)
#   librpclb-dev  dev      headers, librpclb.so, the CMake package (find_package(rpclb))
#   rpclb-tools   tools    rpclb-node, rpclb-call, rpclb-admin
#
#   cpack -G DEB            (in the build directory; doc/how-to/install-packages.md)
#
# The packages install under /usr. The run-time dependencies of the library, the plugins
# and the tools come from dpkg-shlibdeps (package dpkg-dev), or are the Debian 12 names
# below where it is not installed; the development package names the -dev packages of the
# libraries rpclb's headers and CMake package use (Boost 1.81: headers, JSON, Log).
set(CPACK_PACKAGE_NAME rpclb)
set(CPACK_PACKAGE_VENDOR "rpclb")
set(CPACK_PACKAGE_CONTACT "rpclb developers <rpclb@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Debug information stays in the build tree; the packages carry stripped files.
set(CPACK_STRIP_FILES ON)
set(CPACK_COMPONENTS_ALL runtime dev tools)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
find_program(RPCLB_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(RPCLB_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  # librpclb.so.0, which the plugins and the tools link, is in this build, not in an
  # installed package: dpkg-shlibdeps finds it here, and the component dependencies
  # below name its package.
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR}/lib)
else()
  set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS "libboost-json1.81.0, libboost-log1.81.0, libboost-thread1.81.0, libssl3, libc6, libstdc++6, libgcc-s1")
  set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "libboost-json1.81.0, libboost-program-options1.81.0, libboost-filesystem1.81.0, libc6, libstdc++6, libgcc-s1")
endif()
# Depends: <package> (= <version>) for each component a component depends on.
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME librpclb0)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION
  "rpclb library and its selection-algorithm plugins\nlibrpclb.so.0 and the plugins it loads by default (random, round_robin, hash_ring, ...).")
# A shlibs file, so that packages built against librpclb0 depend on it.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_PROJECT_CONFIG_FILE ${CMAKE_CURRENT_LIST_DIR}/cpack_options.cmake)

set(CPACK_DEBIAN_DEV_PACKAGE_NAME librpclb-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libboost1.81-dev, libboost-json1.81-dev, libboost-log1.81-dev")
set(CPACK_COMPONENT_DEV_DEPENDS runtime)
set(CPACK_DEBIAN_DEV_DESCRIPTION
  "rpclb development files\nHeaders, the librpclb.so link and the CMake package: find_package(rpclb) gives rpclb::rpclb.")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME rpclb-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION net)
set(CPACK_COMPONENT_TOOLS_DEPENDS runtime)
set(CPACK_DEBIAN_TOOLS_DESCRIPTION
  "rpclb command-line tools\nrpclb-node (a cluster node from a config file), rpclb-call (calls a function on a cluster) and rpclb-admin (the admin console's client).")

include(CPack)
