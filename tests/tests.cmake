# One line per test file: caflm_add_test(<file stem> <libraries>).
