# Read by cpack for each generator (CPACK_PROJECT_CONFIG_FILE, cmake/packaging.cmake).
# The plugins are modules without a soname, which CPackDeb's shlibs step warns about once
# each for the project's developers: they are meant to have none.
set(CMAKE_SUPPRESS_DEVELOPER_WARNINGS ON)
