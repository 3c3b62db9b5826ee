"""lm-evaluation-harness drives `edge-node serve` as an evaluation would: its
`local-chat-completions` model against the routed server (tiny model on both sides), on 20
CommonsenseQA items from the repository's copy (lm_eval_tasks/duet_commonsense_qa.yaml), fully
offline, to its report with an accuracy. EVALUATION.md gives the same command for the real models."""
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from servers import TinyRouted
from test_openai import metric

ROOT = Path(__file__).resolve().parents[2]


def lm_eval_command(base_url, output):
    """The lm_eval invocation (EVALUATION.md shows it with the real models' server)."""
    model_args = f"base_url={base_url}/chat/completions,model=duet,tokenizer_backend=None,num_concurrent=1,max_retries=1"
    return [sys.executable, "-m", "lm_eval", "--model", "local-chat-completions", "--model_args", model_args, "--apply_chat_template",
            "--include_path", "deploy/clients/lm_eval_tasks", "--tasks", "duet_commonsense_qa", "--limit", "20", "--output_path", str(output)]


class LmEval(unittest.TestCase):
    def test_lm_eval_runs_to_its_report_against_the_routed_server(self):
        tiny = TinyRouted()
        try:
            with tempfile.TemporaryDirectory() as out:
                env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(Path(out) / "hf"))
                r = subprocess.run(lm_eval_command(tiny.base_url, out), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
                self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
                self.assertIn("duet_commonsense_qa", r.stdout)
                (results,) = Path(out).rglob("results_*.json")
                scores = json.loads(results.read_text())["results"]["duet_commonsense_qa"]
                self.assertTrue(0.0 <= scores["exact_match,letter"] <= 1.0, scores)
                self.assertEqual(json.loads(results.read_text())["n-samples"]["duet_commonsense_qa"]["effective"], 20)
            self.assertEqual(metric(tiny.port, "duet_edge_serve_requests_total"), 20)
            self.assertGreater(metric(tiny.port, "duet_edge_serve_tokens_escalated_total"), 0, "routed: the cloud answered some tokens")
        finally:
            tiny.stop()


if __name__ == "__main__":
    unittest.main()
