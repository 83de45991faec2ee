# SPDX-License-Identifier: Apache-2.0
# GPT-2 tokenizer: HF reference cases, the pre-split's character classes, streaming decode, errors.
servekit_test(test_tokenizer LABELS host SOURCES test_tokenizer.cpp)
servekit_test(test_tokenizer_classes LABELS host SOURCES test_tokenizer_classes.cpp)
servekit_test(test_tokenizer_stream LABELS host SOURCES test_tokenizer_stream.cpp)
servekit_test(test_tokenizer_errors LABELS host SOURCES test_tokenizer_errors.cpp)
