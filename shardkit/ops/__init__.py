"""Operations composed from both paths: verify, merge, info, bench, demo."""
