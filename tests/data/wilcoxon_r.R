# Reference outputs of R's wilcox.test for tests/stats/test_stats_wilcoxon.py (one-sample / paired
# differences, conf.int = TRUE, correct = TRUE). Run: Rscript tests/data/wilcoxon_r.R > tests/data/wilcoxon_r.json
# attained_level: 1 - 2 psignrank(qu - 1, n) (one-sided: 1 - psignrank), qu = qsignrank((1 - conf.level)/2, n)
# (one-sided: of 1 - conf.level), at least 1: the level of R's exact interval, which wilcox.test prints only when far off.
# Differences are fractions (accuracy differences over 64, 200 or 240 problems): ties and zeros as in real runs.
set.seed(20240616)
cases <- list()
add <- function(kind, d) cases[[length(cases) + 1]] <<- list(kind = kind, d = d)
add("issue example", c(0.02, 0.01, 0, 0.03, 0.01, -0.01, 0.02, 0, 0.04, 0.01))
for (n in c(3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30)) {
  add("ties", sample(c(-3:-1, 1:6), n, replace = TRUE) / 64)                     # ties, no zeros
  m <- max(2, n - max(1, n %/% 4))
  add("zeros", c(sample(1:60, m) * sample(c(-1, 1, 1), m, replace = TRUE), rep(0, n - m)) / 240)  # zeros, distinct |d|
  add("ties and zeros", sample(-4:6, n, replace = TRUE) / 200)
}
add("ties across signs", c(-0.01, 0.01, 0.02, -0.02, 0.03, 0.01, 0.04))
add("one non-zero", c(0, 0, 0.01, 0))
add("two non-zero", c(0.01, 0, 0.02))
add("all non-zero equal", c(0.02, 0.02, 0.02, 0))
add("all ties but one", c(0.01, 0.01, 0.01, 0.01, 0.03))
add("no ties n=5", c(0.011, 0.023, -0.004, 0.031, 0.017))
add("no ties n=12", round(rnorm(12, 0.01, 0.02), 6))
add("no ties n=49", round(rnorm(49, 0.005, 0.02), 7))
add("no ties n=50", round(rnorm(50, 0.005, 0.02), 7))
f <- function(x) if (is.na(x)) "NaN" else if (is.infinite(x)) (if (x > 0) "Infinity" else "-Infinity") else sprintf("%.17g", x)
out <- character()
for (case in cases) {
  d <- case$d
  runs <- character()
  for (alt in c("two.sided", "greater", "less")) {
    for (cl in c(0.8, 0.9, 0.95, 0.99)) {
      call <- sprintf('wilcox.test(d, alternative = "%s", conf.level = %s, conf.int = TRUE, correct = TRUE)', alt, cl)
      r <- suppressWarnings(eval(parse(text = call)))
      # the level R's exact interval attains (wilcox.test's achieved.alpha); NA outside the exact branch
      nz <- d[d != 0]; n <- length(nz); a <- 1 - cl
      qu <- max(1, qsignrank(if (alt == "two.sided") a / 2 else a, n))
      attained <- if (n < 50 && !any(d == 0) && !any(duplicated(abs(nz))))
        1 - (if (alt == "two.sided") 2 else 1) * psignrank(qu - 1, n) else NA
      runs <- c(runs, sprintf(paste0('    {"call": "%s", "alternative": "%s", "conf_level": %s, "statistic": %s, ',
                                     '"p": %s, "estimate": %s, "ci": [%s, %s], "ci_level": %s, "attained_level": %s}'),
                              gsub('"', '\\\\"', call), alt, cl, f(r$statistic), f(r$p.value), f(r$estimate),
                              f(r$conf.int[1]), f(r$conf.int[2]), f(attr(r$conf.int, "conf.level")), f(attained)))
    }
  }
  values <- paste(sprintf("%.17g", d), collapse = ", ")
  out <- c(out, sprintf('  {"kind": "%s", "d <-": "c(%s)", "d": [%s], "runs": [\n%s\n  ]}', case$kind, values, values,
                        paste(runs, collapse = ",\n")))
}
cat(sprintf('{"r_version": "%s", "cases": [\n%s\n]}\n', R.version.string, paste(out, collapse = ",\n")))
