// The tests' main: GoogleTest's, but a run whose cases all skipped exits 77, which ctest
// (SKIP_RETURN_CODE) reports as skipped; ctest runs one process per suite (gtest_suites.cmake).
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const testing::UnitTest& run = *testing::UnitTest::GetInstance();
  if (rc == 0 && run.successful_test_count() == 0 && run.skipped_test_count() > 0) return 77;
  return rc;
}
