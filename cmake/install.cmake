# Installs the library so that find_package(sdpa CONFIG) gives sdpa::sdpa.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS sdpa EXPORT sdpaTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES
          ${PROJECT_SOURCE_DIR}/include/sdpa/attention.hpp
          ${PROJECT_SOURCE_DIR}/include/sdpa/blocks.hpp
          ${PROJECT_SOURCE_DIR}/include/sdpa/dispatch.hpp
          ${PROJECT_SOURCE_DIR}/include/sdpa/error.hpp
          ${PROJECT_SOURCE_DIR}/include/sdpa/half.hpp
          ${PROJECT_SOURCE_DIR}/include/sdpa/kvcache.hpp
          ${PROJECT_SOURCE_DIR}/include/sdpa/philox.hpp
          ${PROJECT_SOURCE_DIR}/include/sdpa/reference.hpp
          ${PROJECT_SOURCE_DIR}/include/sdpa/sdpa.hpp
          ${PROJECT_SOURCE_DIR}/include/sdpa/tensor.hpp
          ${PROJECT_BINARY_DIR}/include/sdpa/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sdpa)
install(EXPORT sdpaTargets NAMESPACE sdpa:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sdpa)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/sdpaConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/sdpaConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sdpa)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/sdpaConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/sdpaConfig.cmake ${PROJECT_BINARY_DIR}/sdpaConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sdpa)
