# One line per test file: caflm_add_test(<file stem> <libraries>).
caflm_add_test(test_sampler caflm_scheduler)
