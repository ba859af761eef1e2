"""A project's copy of verl's main_ppo (as recipes ship them): only its @hydra.main matters here."""

import hydra


@hydra.main(config_path="config", config_name="my_recipe_trainer", version_base=None)
def main(config):
    from verl.trainer.main_ppo import run_ppo

    run_ppo(config)


if __name__ == "__main__":
    main()
